// expect: runhooks: the hook has a member function
// expect: `afterRun`, which looks like a misspelt `after_run`
// expect: check_near_misses<LossLogHook, true>
// `afterRun` (camelCase) for after_run.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LossLogHook {
  int steps = 0;
  void begin() {}
  void afterRun(auto&, const auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LossLogHook{}};
  session.run();
}
