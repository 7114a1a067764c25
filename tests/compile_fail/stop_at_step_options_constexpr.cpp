// expect: Only one of num_steps or last_step can be specified.
// Options declared constexpr are checked at compile time, with TensorFlow's message.
#include <runhooks/hooks/stop_at_step_hook.hpp>

constexpr runhooks::StopAtStepOptions options{.num_steps = 10, .last_step = 20};
constexpr runhooks::StopAtStepHook hook(options);

int main() {}
