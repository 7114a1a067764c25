// expect: write_the_options_type<runhooks::EvaluationOptions, &runhooks::EvaluationOptions::every_n_steps, &runhooks::EvaluationOptions::every_n_secs, &runhooks::EvaluationOptions::at_start, &runhooks::EvaluationOptions::at_end, &runhooks::EvaluationOptions::output_dir, &runhooks::EvaluationOptions::log>
// expect: Misspelt field? Write EvaluationOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor; the catch-all constructor makes the
// error a few lines that name EvaluationOptions and its fields (detail/no_constructor_fits.hpp).
#include <runhooks/hooks/evaluation_hook.hpp>

struct ValLoss : runhooks::Key<double> {};

struct Trainer {
  void run() {}
};

int main() {
  auto evaluate = [](Trainer&) { return runhooks::KeyValues<ValLoss>(0.5); };
  runhooks::EvaluationHook hook{runhooks::keys<ValLoss>, evaluate, {.every_n_step = 10}};
  (void)hook;
}
