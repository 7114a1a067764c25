// expect: runhooks: the hook has a member function
// expect: `afterRun_`, which looks like a misspelt `after_run`
// expect: check_near_misses<LossLogHook, true>
// A hook passed by std::ref is checked as the hook it refers to.
#include <functional>

#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LossLogHook {
  int steps = 0;
  void begin() {}
  void afterRun_(auto&, const auto&) { ++steps; }
};

int main() {
  LossLogHook hook;
  runhooks::MonitoredSession session{Trainer{}, std::ref(hook)};
  session.run();
}
