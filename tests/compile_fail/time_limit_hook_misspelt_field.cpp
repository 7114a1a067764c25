// expect: write_the_options_type<runhooks::TimeLimitOptions, &runhooks::TimeLimitOptions::max_secs, &runhooks::TimeLimitOptions::save_margin_secs, &runhooks::TimeLimitOptions::resolution_secs>
// expect: Misspelt field? Write TimeLimitOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Lightning's argument is duration) fit no constructor;
// the catch-all names TimeLimitOptions and its fields.
#include <runhooks/hooks/time_limit_hook.hpp>

int main() {
  runhooks::TimeLimitHook<> hook({.duration = 3600.0});
}
