// expect: runhooks: the hook has a member function
// expect: `begni`, which looks like a misspelt `begin`
// expect: check_near_misses<StartHook, true>
// `begni` for begin: two adjacent letters swapped.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct StartHook {
  int starts = 0;
  void begni() { ++starts; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, StartHook{}};
  session.run();
}
