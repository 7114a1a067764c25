// expect: runhooks: the hook's before_run does not fit
// before_run must take the run context; one that takes nothing is an error, not skipped.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct PrepareHook {
  void before_run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, PrepareHook{}};
  session.run();
}
