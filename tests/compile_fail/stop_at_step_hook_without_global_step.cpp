// expect: runhooks::StopAtStepHook needs a backend with `std::int64_t global_step() const`
// StopAtStepHook reads the global step, so the backend must have global_step().
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::StopAtStepHook({.num_steps = 10})};
  session.run();
}
