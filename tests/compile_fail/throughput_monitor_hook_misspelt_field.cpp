// expect: write_the_options_type<runhooks::ThroughputOptions, &runhooks::ThroughputOptions::every_n_steps
// expect: Misspelt field? Write ThroughputOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Lightning's ThroughputMonitor takes batch_size_fn; here
// it is samples_per_step or a samples key) fit no constructor; the catch-all names
// ThroughputOptions and its fields.
#include <runhooks/hooks/throughput_monitor_hook.hpp>

int main() {
  runhooks::ThroughputMonitorHook<> hook({.batch_size = 32});
}
