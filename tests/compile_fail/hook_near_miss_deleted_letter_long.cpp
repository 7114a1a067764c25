// expect: runhooks: the hook has a member function
// expect: `after_create_sesion`, which looks like a misspelt `after_create_session`
// expect: check_near_misses<RestoreHook, true>
// `after_create_sesion` for after_create_session: one letter left out of a long name.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct RestoreHook {
  int restores = 0;
  void begin() {}
  void after_create_sesion(auto&) { ++restores; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, RestoreHook{}};
  session.run();
}
