// expect: runhooks: the backend needs a `void run()` member
// A backend runs one step per run(); a type without it is no backend.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void step() {}
};

struct NoopHook {
  void begin() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, NoopHook{}};
  session.run();
}
