// A user's program: finds runhooks through dependency('runhooks') and uses only the umbrella
// header. Exits 0 iff StopAtStepHook stopped the session after exactly 10 steps.
#include <runhooks/runhooks.hpp>

#include <cstdint>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::StopAtStepHook({.num_steps = 10})};
  while (!session.should_stop()) session.run();
  return session.raw_session().step == 10 ? 0 : 1;
}
