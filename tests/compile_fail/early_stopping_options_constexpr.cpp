// expect: runhooks: EarlyStoppingOptions::patience must be at least 0
// Options declared constexpr are checked at compile time.
#include <runhooks/hooks/early_stopping_hook.hpp>

constexpr runhooks::EarlyStoppingOptions options{.patience = -1};
static_assert((options.validate(), true));

int main() {}
