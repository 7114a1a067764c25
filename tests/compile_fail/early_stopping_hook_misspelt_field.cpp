// expect: write_the_options_type<runhooks::EarlyStoppingOptions, &runhooks::EarlyStoppingOptions::mode, &runhooks::EarlyStoppingOptions::min_delta, &runhooks::EarlyStoppingOptions::patience, &runhooks::EarlyStoppingOptions::baseline, &runhooks::EarlyStoppingOptions::every_n_iter, &runhooks::EarlyStoppingOptions::start_from_check, &runhooks::EarlyStoppingOptions::stopping_threshold, &runhooks::EarlyStoppingOptions::divergence_threshold, &runhooks::EarlyStoppingOptions::check_finite, &runhooks::EarlyStoppingOptions::min_steps>
// expect: Misspelt field? Write EarlyStoppingOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name EarlyStoppingOptions and its fields and say what to write to have the
// field named (early_stopping_options_misspelt_field.cpp).
#include <runhooks/hooks/early_stopping_hook.hpp>

struct ValLoss : runhooks::Key<float> {};

int main() {
  runhooks::EarlyStoppingHook<ValLoss> hook({.monitor = 1, .patience = 3});
}
