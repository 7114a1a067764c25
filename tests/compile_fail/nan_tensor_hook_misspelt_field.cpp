// expect: write_the_options_type<runhooks::NanTensorOptions, &runhooks::NanTensorOptions::fail_on_nan_loss, &runhooks::NanTensorOptions::inf_too>
// expect: Misspelt field? Write NanTensorOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name NanTensorOptions and its fields and say what to write to have the
// field named (nan_tensor_options_misspelt_field.cpp).
#include <runhooks/hooks/nan_tensor_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::NanTensorHook<Loss> hook({.fail_on_NaN_loss = false});
}
