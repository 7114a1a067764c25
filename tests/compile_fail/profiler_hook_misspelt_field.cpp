// expect: write_the_options_type<runhooks::ProfilerOptions, &runhooks::ProfilerOptions::save_steps, &runhooks::ProfilerOptions::save_secs>
// expect: Misspelt field? Write ProfilerOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name ProfilerOptions and its fields and say what to write to have the
// field named (profiler_options_misspelt_field.cpp).
#include <runhooks/hooks/profiler_hook.hpp>

int main() {
  runhooks::ProfilerHook hook({.every_n_steps = 100}, "traces");
}
