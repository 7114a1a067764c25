// expect: runhooks: the hook has a member function
// expect: `aftercreatesession`, which looks like a misspelt `after_create_session`
// expect: check_near_misses<RestoreHook, true>
// `aftercreatesession` for after_create_session: both underscores left out.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct RestoreHook {
  int restores = 0;
  void aftercreatesession(auto&) { ++restores; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, RestoreHook{}};
  session.run();
}
