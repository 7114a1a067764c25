// expect: stop_signals
// first-error: stop_signals
// max-lines: 10
// With the options type written out, the compiler initializes SignalStopOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). No field name contains
// stop_signals, so the hint that lists the fields cannot pass for this error.
#include <csignal>

#include <runhooks/hooks/signal_stop_hook.hpp>

int main() {
  runhooks::SignalStopHook hook(runhooks::SignalStopOptions{.stop_signals = {SIGUSR1}});
}
