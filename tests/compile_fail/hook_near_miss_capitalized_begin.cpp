// expect: runhooks: the hook has a member function
// expect: `Begin`, which looks like a misspelt `begin`
// expect: check_near_misses<StartHook, true>
// `Begin` for begin, beside an end() that fits.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct StartHook {
  int starts = 0;
  void Begin() { ++starts; }
  void end(auto&) {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, StartHook{}};
  session.run();
}
