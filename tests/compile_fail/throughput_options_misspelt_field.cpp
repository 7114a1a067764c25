// expect: log_every_n_steps
// first-error: log_every_n_steps
// max-lines: 10
// With the options type written out, the first error names the misspelt field (Lightning's
// Trainer argument is log_every_n_steps; here it is every_n_steps).
#include <runhooks/hooks/throughput_monitor_hook.hpp>

int main() {
  runhooks::ThroughputMonitorHook<> hook(runhooks::ThroughputOptions{.log_every_n_steps = 50});
}
