// expect: runhooks: ReduceLROnPlateauOptions::factor must be at least 0 and below 1
// Options declared constexpr are checked at compile time: Keras' ValueError for factor >= 1.
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>

constexpr runhooks::ReduceLROnPlateauOptions options{.factor = 1.0};
static_assert((options.validate(), true));

int main() {}
