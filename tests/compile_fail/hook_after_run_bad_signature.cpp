// expect: runhooks: the hook's after_run does not fit
// after_run must take the run context and the run values; a one-argument after_run is an
// error naming the hook and the point, never a callback silently skipped.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct LogAfterRunHook {
  void after_run(auto& run_context) { (void)run_context; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, LogAfterRunHook{}};
  session.run();
}
