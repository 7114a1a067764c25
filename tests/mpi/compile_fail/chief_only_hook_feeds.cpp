// expect: runhooks: a hook whose calls are skipped on some ranks (MpiChiefOnly) must not feed the backend
// A chief-only hook that feeds would leave the other ranks' steps without the feed: a compile
// error, not a step that silently differs between ranks.
#include <runhooks/monitored_session.hpp>
#include <runhooks/mpi/mpi_chief_only.hpp>

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
  runhooks::MonitoredSession session(Backend{}, runhooks::MpiChiefOnly(Schedule{}, true));
  session.run();
}
