// expect: invalid every_n_iter
// Options declared constexpr are checked at compile time, with TensorFlow's message.
#include <runhooks/hooks/logging_tensor_hook.hpp>

constexpr runhooks::LoggingTensorOptions options{.every_n_iter = 0};
static_assert((options.validate(), true));

int main() {}
