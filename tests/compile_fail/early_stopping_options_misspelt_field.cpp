// expect: monitor
// first-error: monitor
// max-lines: 10
// With the options type written out, the compiler initializes EarlyStoppingOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). monitor is a Keras argument;
// here the key is the hook's template argument; no field name contains monitor, so the hint that
// lists the fields cannot pass for this error.
#include <runhooks/hooks/early_stopping_hook.hpp>

struct ValLoss : runhooks::Key<float> {};

int main() {
  runhooks::EarlyStoppingHook<ValLoss> hook(runhooks::EarlyStoppingOptions{.monitor = 1, .patience = 3});
}
