// expect: every_steps
// first-error: every_steps
// max-lines: 10
// With the options type written out, the compiler initializes StepCounterOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). every_steps is
// SecondOrStepTimer's name for it; no field name contains every_steps, so the hint that lists the
// fields cannot pass for this error.
#include <runhooks/hooks/step_counter_hook.hpp>

int main() {
  runhooks::StepCounterHook hook(runhooks::StepCounterOptions{.every_steps = 10});
}
