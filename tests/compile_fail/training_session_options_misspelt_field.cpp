// expect: save_checkpoints_steps
// first-error: save_checkpoints_steps
// max-lines: 10
// With the options type written out, the compiler initializes TrainingSessionOptions outside
// overload resolution, and its first error names the misspelt field (GCC: "has no non-static
// data member named", Clang: "field designator ... does not refer to any field").
#include <cstdint>
#include <string>

#include <runhooks/training_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  const std::string dir = "ckpt";
  auto session = runhooks::make_training_session(
      runhooks::TrainingSessionOptions{.checkpoint_dir = dir, .save_checkpoints_steps = 50},
      [] { return Trainer{}; });
}
