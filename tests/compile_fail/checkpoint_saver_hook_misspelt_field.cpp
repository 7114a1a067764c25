// expect: write_the_options_type<runhooks::CheckpointSaverOptions, &runhooks::CheckpointSaverOptions::checkpoint_dir, &runhooks::CheckpointSaverOptions::save_steps, &runhooks::CheckpointSaverOptions::save_secs, &runhooks::CheckpointSaverOptions::basename, &runhooks::CheckpointSaverOptions::max_to_keep, &runhooks::CheckpointSaverOptions::keep_checkpoint_every_n_hours, &runhooks::CheckpointSaverOptions::async_save, &runhooks::CheckpointSaverOptions::when_save_in_flight, &runhooks::CheckpointSaverOptions::checked>
// expect: Misspelt field? Write CheckpointSaverOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field fit no constructor. The compiler cannot name the
// field in this form (detail/no_constructor_fits.hpp says why); the catch-all constructor makes the
// error a few lines that name CheckpointSaverOptions and its fields and say what to write to have
// the field named (checkpoint_saver_options_misspelt_field.cpp).
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>

int main() {
  runhooks::CheckpointSaverHook hook({.checkpoint_dir = "ckpt", .checkpoint_basename = "m"});
}
