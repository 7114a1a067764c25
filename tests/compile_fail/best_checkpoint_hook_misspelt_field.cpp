// expect: write_the_options_type<runhooks::BestCheckpointOptions, &runhooks::BestCheckpointOptions::mode, &runhooks::BestCheckpointOptions::save_top_k, &runhooks::BestCheckpointOptions::initial_value_threshold, &runhooks::BestCheckpointOptions::every_n_iter>
// expect: Misspelt field? Write BestCheckpointOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Lightning's spelling, save_top_k's neighbour) fit no
// constructor; the catch-all constructor makes the error name BestCheckpointOptions and its fields.
#include <runhooks/checkpoint/best_checkpoint_hook.hpp>

struct ValLoss : runhooks::Key<double> {};

int main() {
  runhooks::BestCheckpointHook<ValLoss> hook({.monitor = 1, .save_top_k = 3});
}
