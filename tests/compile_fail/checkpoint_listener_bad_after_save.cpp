// expect: runhooks: a checkpoint listener's after_save does not fit. Write `bool after_save(auto& session, std::int64_t global_step)`
// A listener point with the wrong signature is an error, never a callback silently not called.
#include <cstdint>
#include <filesystem>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  void save(const std::filesystem::path&) const {}
  void restore(const std::filesystem::path&) {}
};

struct Listener {
  bool after_save(std::int64_t global_step) { return global_step > 10; }  // the session is missing
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{},
      runhooks::CheckpointSaverHook({.checkpoint_dir = "ckpt", .save_steps = 100}, Listener{})};
  session.run();
}
