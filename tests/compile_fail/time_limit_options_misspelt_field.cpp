// expect: max_time
// first-error: max_time
// max-lines: 10
// With the options type written out, the first error names the misspelt field (Lightning's
// Trainer argument is max_time; here it is max_secs).
#include <runhooks/hooks/time_limit_hook.hpp>

int main() {
  runhooks::TimeLimitHook<> hook(runhooks::TimeLimitOptions{.max_time = 3600.0});
}
