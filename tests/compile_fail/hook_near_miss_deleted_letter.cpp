// expect: runhooks: the hook has a member function
// expect: `befor_run`, which looks like a misspelt `before_run`
// expect: check_near_misses<PrepareHook, true>
// `befor_run` for before_run: one letter left out.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct PrepareHook {
  int steps = 0;
  void befor_run(auto&) { ++steps; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, PrepareHook{}};
  session.run();
}
