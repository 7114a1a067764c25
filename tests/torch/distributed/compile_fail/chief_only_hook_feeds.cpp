// expect: runhooks: a hook whose calls are skipped on some ranks (ChiefOnly) must not feed the backend
// The generic ChiefOnly (any engine: c10d's, MPI's) says its own name: a chief-only hook that
// feeds would leave the other ranks' steps without the feed, a compile error.
#include <runhooks/distributed/chief_only.hpp>
#include <runhooks/monitored_session.hpp>

#include <cstdint>

struct LearningRate : runhooks::Key<float> {};

struct Backend {
  std::int64_t step = 0;
  float rate = 0.1f;
  void run() { ++step; }
  void feed(LearningRate, float value) { rate = value; }
};

struct Schedule {
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::feed<LearningRate>(0.5f)}; }
};

int main() {
  runhooks::MonitoredSession session(Backend{}, runhooks::ChiefOnly(Schedule{}, true));
  session.run();
}
