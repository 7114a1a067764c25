// expect: runhooks: a hook and the caller of run() feed the same input
// A hook and the caller feeding one input is an error at compile time (TensorFlow: at run time).
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct LearningRate : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  void feed(LearningRate, float) {}
};

struct DecayHook {
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::feed<LearningRate>(0.1f)}; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, DecayHook{}};
  session.run(runhooks::SessionRunArgs{runhooks::feed<LearningRate>(0.5f)});
}
