// expect: write_the_options_type<runhooks::SummarySaverOptions, &runhooks::SummarySaverOptions::save_steps, &runhooks::SummarySaverOptions::save_secs>
// expect: Misspelt field? Write SummarySaverOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name SummarySaverOptions and its fields and say what to write to have the
// field named (summary_saver_options_misspelt_field.cpp).
#include <runhooks/hooks/summary_saver_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::SummarySaverHook hook({.every_n_steps = 100}, "logs", runhooks::scalars<Loss>);
}
