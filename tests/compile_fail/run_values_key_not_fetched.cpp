// expect: runhooks::SessionRunValues: this key was not fetched
// A hook reads only the values its own before_run asked for.
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct Loss : runhooks::Key<float> {};
struct Accuracy : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  float fetch(Loss) const { return 0.5f; }
  float fetch(Accuracy) const { return 0.9f; }
};

struct LossLoggerHook {
  float last = 0;
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::fetch<Loss>()}; }
  void after_run(auto&, const auto& run_values) { last = run_values[Accuracy{}].value_or(0); }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LossLoggerHook{}};
  session.run();
}
