// expect: runhooks: the hook has a member function
// expect: `AfterRun`, which looks like a misspelt `after_run`
// expect: check_near_misses<LossLogHook, true>
// `AfterRun` (PascalCase) for after_run, in a hook with no other point.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LossLogHook {
  int steps = 0;
  void AfterRun(auto&, const auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LossLogHook{}};
  session.run();
}
