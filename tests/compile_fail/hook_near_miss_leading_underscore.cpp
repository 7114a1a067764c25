// expect: runhooks: the hook has a member function
// expect: `_before_run`, which looks like a misspelt `before_run`
// expect: check_near_misses<PrepareHook, true>
// `_before_run` for before_run: a leading underscore.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct PrepareHook {
  int steps = 0;
  void end(auto&) {}
  void _before_run(auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, PrepareHook{}};
  session.run();
}
