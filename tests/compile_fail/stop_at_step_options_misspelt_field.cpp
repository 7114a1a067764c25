// expect: max_steps
// first-error: max_steps
// max-lines: 10
// With the options type written out, the compiler initializes StopAtStepOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). max_steps is
// Estimator.train's name for it; no field name contains max_steps, so the hint that lists the
// fields cannot pass for this error.
#include <runhooks/hooks/stop_at_step_hook.hpp>

int main() {
  runhooks::StopAtStepHook hook(runhooks::StopAtStepOptions{.max_steps = 1000});
}
