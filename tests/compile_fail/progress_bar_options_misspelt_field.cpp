// expect: max_steps
// first-error: max_steps
// max-lines: 10
// With the options type written out, the compiler initializes ProgressBarOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). No field name contains
// max_steps, so the hint that lists the fields cannot pass for this error.
#include <runhooks/hooks/progress_bar_hook.hpp>

int main() {
  runhooks::ProgressBarHook hook(runhooks::ProgressBarOptions{.max_steps = 1000});
}
