// expect: fail_on_NaN_loss
// first-error: fail_on_NaN_loss
// max-lines: 10
// With the options type written out, the compiler initializes NanTensorOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). No field name contains
// fail_on_NaN_loss, so the hint that lists the fields cannot pass for this error.
#include <runhooks/hooks/nan_tensor_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::NanTensorHook<Loss> hook(runhooks::NanTensorOptions{.fail_on_NaN_loss = false});
}
