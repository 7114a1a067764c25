// expect: runhooks: the hook has a member function
// expect: `afterrun`, which looks like a misspelt `after_run`
// expect: check_near_misses<LossLogHook, true>
// `afterrun` for after_run: the hook's begin() fits, its afterrun would never be called.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LossLogHook {
  int steps = 0;
  void begin() { steps = 0; }
  void afterrun(auto&, const auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LossLogHook{}};
  session.run();
}
