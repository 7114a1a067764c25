// expect: declare every hook with state (StatefulHook: EarlyStoppingHook, ReduceLROnPlateauHook, TimeLimitHook) before the CheckpointSaverHook
// A save reads the hooks' states after the hooks declared before the saver saw the step: an
// EarlyStoppingHook after it would be saved a step behind the backend, and a resumed run would miss
// a check (hook state in the checkpoint, docs/hooks.md).
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>
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
  runhooks::MonitoredSession session(Backend{},
                                     runhooks::CheckpointSaverHook({.checkpoint_dir = "/tmp/x", .save_steps = 5}),
                                     runhooks::EarlyStoppingHook<ValLoss>({.patience = 3}));
}
