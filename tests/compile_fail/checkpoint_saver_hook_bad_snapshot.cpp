// expect: runhooks::CheckpointSaverHook: the backend's `snapshot` fits neither form of runhooks::Snapshottable, so its saves could not run in the background
// expect: Trainer
// A snapshot member whose signature is slightly wrong (a pointer where the in-place form takes a
// reference) is an error, never a backend silently saved on the training thread.
#include <cstdint>
#include <filesystem>
#include <vector>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  std::vector<double> parameters = std::vector<double>(1000, 0.0);
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  void save(const std::filesystem::path&) const {}
  void restore(const std::filesystem::path&) {}

  struct Snapshot {
    std::vector<double> parameters;
    void write(const std::filesystem::path&) const {}
  };
  void snapshot(Snapshot* into) const { into->parameters.assign(parameters.begin(), parameters.end()); }
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::CheckpointSaverHook({.checkpoint_dir = "ckpt", .save_steps = 100})};
  session.run();
}
