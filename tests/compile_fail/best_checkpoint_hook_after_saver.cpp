// expect: runhooks::BestCheckpointHook must be declared before the CheckpointSaverHook
// A best save runs in the saver's after_run of the step whose value ranked: a BestCheckpointHook
// after the saver would ask for it once the saver's after_run of that step is over
// (docs/checkpoints.md, best checkpoints by a metric).
#include <runhooks/checkpoint/best_checkpoint_hook.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/monitored_session.hpp>

#include <cstdint>
#include <filesystem>

struct ValLoss : runhooks::Key<double> {};

struct Backend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(ValLoss) const { return 1.0; }
  void save(const std::filesystem::path&) const {}
  void restore(const std::filesystem::path&) {}
};

int main() {
  runhooks::MonitoredSession session(
      Backend{}, runhooks::CheckpointSaverHook({.checkpoint_dir = "/tmp/x", .save_steps = 5}),
      runhooks::BestCheckpointHook<ValLoss>({.save_top_k = 3}));
  runhooks::link_hooks(session);
}
