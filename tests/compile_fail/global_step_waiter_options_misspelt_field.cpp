// expect: poll_secs
// first-error: poll_secs
// max-lines: 10
// With the options type written out, the compiler initializes GlobalStepWaiterOptions outside
// overload resolution, and its first error names the misspelt field (GCC: "has no non-static data
// member named", Clang: "field designator ... does not refer to any field"). No field name contains
// poll_secs, so the hint that lists the fields cannot pass for this error.
#include <runhooks/hooks/global_step_waiter_hook.hpp>

int main() {
  runhooks::GlobalStepWaiterHook hook(100, runhooks::GlobalStepWaiterOptions{.poll_secs = 1.0});
}
