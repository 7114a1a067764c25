// expect: runhooks: the hook has a member function
// expect: `beforeRun`, which looks like a misspelt `before_run`
// expect: check_near_misses<PrepareHook, true>
// A hook with before_run and also `beforeRun`: the second one would never be called.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct PrepareHook {
  int steps = 0;
  void before_run(auto&) { ++steps; }
  void beforeRun(auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, PrepareHook{}};
  session.run();
}
