// expect: write_the_options_type<runhooks::ExceptionCheckpointOptions, &runhooks::ExceptionCheckpointOptions::checkpoint_dir, &runhooks::ExceptionCheckpointOptions::name>
// expect: Misspelt field? Write ExceptionCheckpointOptions{...} to see which
// first-error: deleted
// max-lines: 10
// Braced options with a misspelt field (Lightning's OnExceptionCheckpoint takes dirpath) fit no
// constructor; the catch-all names ExceptionCheckpointOptions and its fields.
#include <runhooks/checkpoint/saver/exception_checkpoint_hook.hpp>

int main() {
  runhooks::ExceptionCheckpointHook hook({.dirpath = "checkpoints"});
}
