// expect: mode_tag_contradicts_key<ValLoss, runhooks::MetricMode::min>
// expect: runhooks: runhooks::maximize given for a key that declares direction min (lower is better): pass runhooks::minimize, or no tag to use the key's direction.
// first-error: static
// max-lines: 12
// The mode tag puts the mode in the hook's type, so a key declaring the other direction is a
// compile error however the options are made (options.mode is checked when the hook is made).
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>

struct ValLoss : runhooks::Key<float> {
  static constexpr runhooks::MetricMode direction = runhooks::MetricMode::min;
};

int main() {
  runhooks::ReduceLROnPlateauHook hook{runhooks::keys<ValLoss>, runhooks::maximize, {.patience = 2}};
}
