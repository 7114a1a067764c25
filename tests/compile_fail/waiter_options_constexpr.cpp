// expect: runhooks: a duration option is out of range
// expect: GlobalStepWaiterOptions::poll_interval_secs
// Options declared constexpr are checked at compile time: a zero poll interval does not compile.
#include <runhooks/hooks/global_step_waiter_hook.hpp>

constexpr runhooks::GlobalStepWaiterOptions options{.poll_interval_secs = 0.0};
static_assert((options.validate(), true));

int main() {}
