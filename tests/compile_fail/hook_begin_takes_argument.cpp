// expect: runhooks: the hook's begin() does not fit
// begin() runs before the backend exists, so it takes no argument.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct StartHook {
  void begin(Trainer&) {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, StartHook{}};
  session.run();
}
