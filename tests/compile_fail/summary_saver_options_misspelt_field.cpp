// expect: every_n_steps
// first-error: every_n_steps
// max-lines: 10
// With the options type written out, the compiler initializes SummarySaverOptions outside overload
// resolution, and its first error names the misspelt field (GCC: "has no non-static data member
// named", Clang: "field designator ... does not refer to any field"). every_n_steps is the other
// hooks' name for it; no field name contains every_n_steps, so the hint that lists the fields
// cannot pass for this error.
#include <runhooks/hooks/summary_saver_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::SummarySaverHook hook(runhooks::SummarySaverOptions{.every_n_steps = 100}, "logs",
                                   runhooks::scalars<Loss>);
}
