// expect: write_the_options_type<runhooks::StopAtStepOptions, &runhooks::StopAtStepOptions::num_steps, &runhooks::StopAtStepOptions::last_step>
// expect: Misspelt field? Write StopAtStepOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name StopAtStepOptions and its fields and say what to write to have the
// field named (stop_at_step_options_misspelt_field.cpp).
#include <runhooks/hooks/stop_at_step_hook.hpp>

int main() {
  runhooks::StopAtStepHook hook({.max_steps = 1000});
}
