// expect: exclude_batches_path
// first-error: exclude_batches_path
// max-lines: 10
// With the options type written out, the first error names the misspelt field.
#include <runhooks/hooks/spike_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::SpikeHook<Loss> hook(runhooks::SpikeOptions{.window = 10, .exclude_batches_path = "skip.json"});
}
