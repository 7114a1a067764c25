// expect: runhooks::ProfilerHook needs a backend with `std::int64_t global_step() const`
// ProfilerHook names its traces after the global step (TensorFlow: RuntimeError in begin()).
#include <runhooks/hooks/profiler_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::ProfilerHook{{.save_steps = 10}}};
  session.run();
}
