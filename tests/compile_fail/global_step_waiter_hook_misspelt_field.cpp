// expect: write_the_options_type<runhooks::GlobalStepWaiterOptions, &runhooks::GlobalStepWaiterOptions::poll_interval_secs, &runhooks::GlobalStepWaiterOptions::timeout_secs>
// expect: Misspelt field? Write GlobalStepWaiterOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name GlobalStepWaiterOptions and its fields and say what to write to have
// the field named (global_step_waiter_options_misspelt_field.cpp).
#include <runhooks/hooks/global_step_waiter_hook.hpp>

int main() {
  runhooks::GlobalStepWaiterHook hook(100, {.poll_secs = 1.0});
}
