// expect: runhooks: step_fn must take exactly one argument, the step context
// run_step_fn calls step_fn with the step context only.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}};
  session.run_step_fn([](auto& step_context, int repeat) {
    for (int i = 0; i < repeat; ++i) step_context.run_with_hooks();
  });
}
