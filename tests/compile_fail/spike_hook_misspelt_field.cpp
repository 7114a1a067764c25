// expect: write_the_options_type<runhooks::SpikeOptions, &runhooks::SpikeOptions::mode, &runhooks::SpikeOptions::window, &runhooks::SpikeOptions::warmup, &runhooks::SpikeOptions::atol, &runhooks::SpikeOptions::rtol, &runhooks::SpikeOptions::finite_only, &runhooks::SpikeOptions::on_spike, &runhooks::SpikeOptions::max_rollbacks, &runhooks::SpikeOptions::after_rollbacks>
// expect: Misspelt field? Write SpikeOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Lightning's exclude_batches_path has no counterpart here)
// fit no constructor; the catch-all names SpikeOptions and its fields.
#include <runhooks/hooks/spike_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::SpikeHook<Loss> hook({.window = 10, .exclude_batches_path = "skip.json"});
}
