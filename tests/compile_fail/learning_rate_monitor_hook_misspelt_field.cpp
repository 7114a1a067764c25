// expect: write_the_options_type<runhooks::LearningRateMonitorOptions, &runhooks::LearningRateMonitorOptions::every_n_steps, &runhooks::LearningRateMonitorOptions::tag>
// expect: Misspelt field? Write LearningRateMonitorOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Lightning's logging_interval) fit no constructor; the
// catch-all names LearningRateMonitorOptions and its fields.
#include <runhooks/hooks/learning_rate_monitor_hook.hpp>

int main() {
  runhooks::LearningRateMonitorHook<> hook({.logging_interval = 100});
}
