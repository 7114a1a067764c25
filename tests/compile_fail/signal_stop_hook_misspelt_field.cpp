// expect: write_the_options_type<runhooks::SignalStopOptions, &runhooks::SignalStopOptions::signals>
// expect: Misspelt field? Write SignalStopOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name SignalStopOptions and its fields and say what to write to have the
// field named (signal_stop_options_misspelt_field.cpp).
#include <csignal>

#include <runhooks/hooks/signal_stop_hook.hpp>

int main() {
  runhooks::SignalStopHook hook({.stop_signals = {SIGUSR1}});
}
