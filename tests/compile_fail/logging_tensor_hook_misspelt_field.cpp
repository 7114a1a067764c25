// expect: write_the_options_type<runhooks::LoggingTensorOptions, &runhooks::LoggingTensorOptions::every_n_iter, &runhooks::LoggingTensorOptions::every_n_secs, &runhooks::LoggingTensorOptions::at_end>
// expect: Misspelt field? Write LoggingTensorOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name LoggingTensorOptions and its fields and say what to write to have the
// field named (logging_tensor_options_misspelt_field.cpp).
#include <runhooks/hooks/logging_tensor_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::LoggingTensorHook hook{runhooks::keys<Loss>, {.every_n_iters = 100}};
}
