// expect: runhooks::SummarySaverHook needs a backend with `std::int64_t global_step() const`
// SummarySaverHook stamps summaries with the global step (TensorFlow: RuntimeError in begin()).
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Loss : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  float fetch(Loss) const { return 0.5f; }
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::SummarySaverHook{{.save_steps = 10}, "logs", runhooks::scalars<Loss>}};
  session.run();
}
