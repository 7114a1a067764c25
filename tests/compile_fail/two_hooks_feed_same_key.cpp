// expect: runhooks: two hooks feed the same input
// Two hooks feeding one input is an error at compile time (TensorFlow: at every run).
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct LearningRate : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  void feed(LearningRate, float) {}
};

struct WarmupHook {
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::feed<LearningRate>(0.01f)}; }
};

struct DecayHook {
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::feed<LearningRate>(0.1f)}; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, WarmupHook{}, DecayHook{}};
  session.run();
}
