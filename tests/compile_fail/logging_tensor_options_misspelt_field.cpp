// expect: every_n_iters
// first-error: every_n_iters
// max-lines: 10
// With the options type written out, the compiler initializes LoggingTensorOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). No field name contains
// every_n_iters, so the hint that lists the fields cannot pass for this error.
#include <runhooks/hooks/logging_tensor_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::LoggingTensorHook hook{runhooks::keys<Loss>,
                                    runhooks::LoggingTensorOptions{.every_n_iters = 100}};
}
