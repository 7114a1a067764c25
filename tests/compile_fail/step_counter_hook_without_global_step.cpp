// expect: runhooks::StepCounterHook needs a backend with `std::int64_t global_step() const`
// StepCounterHook measures global steps per second, so the backend must have global_step().
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::StepCounterHook<>{}};
  session.run();
}
