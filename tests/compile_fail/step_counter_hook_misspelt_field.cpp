// expect: write_the_options_type<runhooks::StepCounterOptions, &runhooks::StepCounterOptions::every_n_steps, &runhooks::StepCounterOptions::every_n_secs, &runhooks::StepCounterOptions::tag>
// expect: Misspelt field? Write StepCounterOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name StepCounterOptions and its fields and say what to write to have the
// field named (step_counter_options_misspelt_field.cpp).
#include <runhooks/hooks/step_counter_hook.hpp>

int main() {
  runhooks::StepCounterHook hook({.every_n_step = 10});
}
