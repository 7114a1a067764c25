// expect: runhooks::ChiefSessionCreator restores checkpoints and needs a Checkpointable backend: add `void save(const std::filesystem::path& prefix) const` and `void restore(const std::filesystem::path& prefix)`
// expect: Trainer
// ChiefSessionCreator restores into the backend, so the backend must be Checkpointable.
#include <cstdint>

#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator([] { return Trainer{}; }, {.checkpoint_dir = "ckpt"})};
  session.run();
}
