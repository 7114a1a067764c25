// expect: every_n_step
// first-error: every_n_step
// max-lines: 10
// With the options type written out, the first error names the misspelt field.
#include <cstdint>

#include <runhooks/hooks/learning_rate_schedule_hook.hpp>

int main() {
  runhooks::LearningRateScheduleHook hook{[](std::int64_t) { return 0.1; },
                                          runhooks::LearningRateScheduleOptions{.every_n_step = 2}};
}
