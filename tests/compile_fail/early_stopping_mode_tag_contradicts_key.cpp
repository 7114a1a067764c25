// expect: mode_tag_contradicts_key<Accuracy, runhooks::MetricMode::max>
// expect: runhooks: runhooks::minimize given for a key that declares direction max (higher is better): pass runhooks::maximize, or no tag to use the key's direction.
// first-error: static
// max-lines: 12
// The mode tag puts the mode in the hook's type, so a key declaring the other direction is a
// compile error however the options are made (options.mode is checked when the hook is made).
#include <runhooks/hooks/early_stopping_hook.hpp>

struct Accuracy : runhooks::Key<float> {
  static constexpr runhooks::MetricMode direction = runhooks::MetricMode::max;
};

int main() {
  runhooks::EarlyStoppingHook hook{runhooks::keys<Accuracy>, runhooks::minimize, {.patience = 3}};
}
