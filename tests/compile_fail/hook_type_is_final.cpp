// expect: runhooks: a hook type must not be final
// A final hook cannot be probed for misfitting hook points, so it is rejected, not half-checked.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct CountingHook final {
  int calls = 0;
  void after_run(auto&, const auto&) { ++calls; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, CountingHook{}};
  session.run();
}
