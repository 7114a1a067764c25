// expect: lr_min
// first-error: lr_min
// max-lines: 10
// With the options type written out, the first error names the misspelt field.
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>

struct ValLoss : runhooks::Key<float> {};

int main() {
  runhooks::ReduceLROnPlateauHook<ValLoss> hook(runhooks::ReduceLROnPlateauOptions{.factor = 0.5, .lr_min = 1e-6});
}
