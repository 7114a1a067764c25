// expect: runhooks::LoggingTensorHook: the formatter must be callable
// A formatter takes the values and returns the line; one that takes something else is named.
#include <runhooks/hooks/logging_tensor_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::LoggingTensorHook hook{runhooks::keys<Loss>, {.every_n_iter = 1}, [](int) { return 1; }};
  (void)hook;
}
