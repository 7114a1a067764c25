// expect: checkpoint_basename
// first-error: checkpoint_basename
// max-lines: 10
// With the options type written out, the compiler initializes CheckpointSaverOptions outside
// overload resolution, and its first error names the misspelt field (GCC: "has no non-static data
// member named", Clang: "field designator ... does not refer to any field"). checkpoint_basename is
// TensorFlow's argument; here it is basename; no field name contains checkpoint_basename, so the
// hint that lists the fields cannot pass for this error.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>

int main() {
  runhooks::CheckpointSaverHook hook(
      runhooks::CheckpointSaverOptions{.checkpoint_dir = "ckpt", .checkpoint_basename = "m"});
}
