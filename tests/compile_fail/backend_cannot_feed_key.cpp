// expect: runhooks: a hook or the caller feeds a key the backend does not accept
// Feeding a key needs `void feed(Key, value_type)` on the backend.
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct LearningRate : runhooks::Key<float> {};
struct Momentum : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  void feed(LearningRate, float) {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}};
  session.run(runhooks::SessionRunArgs{runhooks::feed<Momentum>(0.9f)});
}
