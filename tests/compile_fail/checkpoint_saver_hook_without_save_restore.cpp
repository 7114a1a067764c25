// expect: runhooks::CheckpointSaverHook needs a Checkpointable backend: add `void save(const std::filesystem::path& prefix) const` and `void restore(const std::filesystem::path& prefix)` to the backend type named in this instantiation
// expect: Trainer
// A backend used with CheckpointSaverHook must be able to save and restore itself.
#include <cstdint>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::CheckpointSaverHook({.checkpoint_dir = "ckpt", .save_steps = 100})};
  session.run();
}
