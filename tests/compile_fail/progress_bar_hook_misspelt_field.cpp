// expect: write_the_options_type<runhooks::ProgressBarOptions, &runhooks::ProgressBarOptions::total, &runhooks::ProgressBarOptions::redraws_per_sec, &runhooks::ProgressBarOptions::plain_line_secs, &runhooks::ProgressBarOptions::width, &runhooks::ProgressBarOptions::terminal>
// expect: Misspelt field? Write ProgressBarOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name ProgressBarOptions and its fields and say what to write to have the
// field named (progress_bar_options_misspelt_field.cpp).
#include <runhooks/hooks/progress_bar_hook.hpp>

int main() {
  runhooks::ProgressBarHook hook({.totl = 1000});
}
