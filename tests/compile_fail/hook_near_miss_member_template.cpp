// expect: runhooks: the hook has a member function
// expect: `afterrun`, which looks like a misspelt `after_run`
// expect: check_near_misses<LossLogHook, true>
// A member template `afterrun`: `&Hook::afterrun` names no single function, and is still caught.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LossLogHook {
  int steps = 0;
  void begin() {}
  template <class Context>
  void afterrun(Context&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LossLogHook{}};
  session.run();
}
