// expect: runhooks: this type is not a hook
// A misspelled hook point (before_step for before_run) leaves a type that is no hook at all.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct MisspelledHook {
  void before_step(auto&) {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, MisspelledHook{}};
  session.run();
}
