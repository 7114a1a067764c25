// expect: runhooks::GlobalStepWaiterHook needs a backend with `std::int64_t global_step() const`
// GlobalStepWaiterHook waits on the global step, so the backend must have global_step().
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::GlobalStepWaiterHook<>{100}};
  session.run();
}
