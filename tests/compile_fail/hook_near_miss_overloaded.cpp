// expect: runhooks: the hook has a member function
// expect: `before_Run`, which looks like a misspelt `before_run`
// expect: check_near_misses<PrepareHook, true>
// An overloaded `before_Run`: an overload set is caught as one misspelt member.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct PrepareHook {
  int steps = 0;
  void begin() {}
  void before_Run() { ++steps; }
  void before_Run(auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, PrepareHook{}};
  session.run();
}
