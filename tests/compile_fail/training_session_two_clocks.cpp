// expect: runhooks::make_training_session takes at most one clock
// One clock times every timed default hook; two would leave the choice to argument order.
#include <cstdint>

#include <runhooks/manual_clock.hpp>
#include <runhooks/training_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  runhooks::ManualClock clock;
  auto session = runhooks::make_training_session({}, [] { return Trainer{}; }, clock,
                                                 runhooks::SteadyClock{});
  session.run();
}
