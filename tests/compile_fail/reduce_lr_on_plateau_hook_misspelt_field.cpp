// expect: write_the_options_type<runhooks::ReduceLROnPlateauOptions, &runhooks::ReduceLROnPlateauOptions::mode, &runhooks::ReduceLROnPlateauOptions::factor, &runhooks::ReduceLROnPlateauOptions::patience, &runhooks::ReduceLROnPlateauOptions::min_delta, &runhooks::ReduceLROnPlateauOptions::cooldown, &runhooks::ReduceLROnPlateauOptions::min_lr, &runhooks::ReduceLROnPlateauOptions::every_n_iter>
// expect: Misspelt field? Write ReduceLROnPlateauOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Keras spells it min_lr; lr_min is a guess) fit no
// constructor; the catch-all names ReduceLROnPlateauOptions and its fields.
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>

struct ValLoss : runhooks::Key<float> {};

int main() {
  runhooks::ReduceLROnPlateauHook<ValLoss> hook({.factor = 0.5, .lr_min = 1e-6});
}
