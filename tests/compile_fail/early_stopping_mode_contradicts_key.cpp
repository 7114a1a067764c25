// expect: runhooks: the options' mode contradicts the direction the key declares
// A key that declares higher is better, and constexpr options saying min: a compile error
// (options made at run time throw std::invalid_argument naming the option, the key and both
// modes). Keras guesses the direction from the metric's name at run time.
#include <runhooks/hooks/early_stopping_hook.hpp>

struct Accuracy : runhooks::Key<float> {
  static constexpr runhooks::MetricMode direction = runhooks::MetricMode::max;
};

constexpr runhooks::EarlyStoppingOptions options{.mode = runhooks::MetricMode::min, .patience = 3};
static_assert((options.validate_for<Accuracy>(), true));

int main() {}
