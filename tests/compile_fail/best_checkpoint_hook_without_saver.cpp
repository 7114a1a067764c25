// expect: runhooks::BestCheckpointHook saves through the session's CheckpointSaverHook: give the session exactly one, declared after the BestCheckpointHook, held by value, by std::ref or in runhooks::Conditional (runhooks::ChiefOnly hides it).
// The hook has no directory of its own: its checkpoints are the saver's (one writer per
// directory), found when the session's hooks are linked.
#include <runhooks/checkpoint/best_checkpoint_hook.hpp>
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
  runhooks::MonitoredSession session(Backend{}, runhooks::BestCheckpointHook<ValLoss>());
  runhooks::link_hooks(session);
}
