// expect: runhooks: the hook has a member function
// expect: `End`, which looks like a misspelt `end`
// expect: check_near_misses<SaveHook, true>
// `End` for end: a capitalized point, in a hook whose before_run fits.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct SaveHook {
  int saves = 0;
  void before_run(auto&) {}
  void End(auto&) { ++saves; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, SaveHook{}};
  session.run();
}
