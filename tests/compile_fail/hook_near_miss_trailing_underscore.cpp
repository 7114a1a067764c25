// expect: runhooks: the hook has a member function
// expect: `after_run_`, which looks like a misspelt `after_run`
// expect: check_near_misses<LossLogHook, true>
// `after_run_` for after_run: a trailing underscore.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LossLogHook {
  int steps = 0;
  void after_run_(auto&, const auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LossLogHook{}};
  session.run();
}
