// expect: Can not provide both every_secs and every_steps.
// CheckpointSaverOptions declared constexpr are checked as they are made: TensorFlow's error, at
// compile time.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>

constexpr runhooks::CheckpointSaverOptions options{
    .checkpoint_dir = "ckpt", .save_steps = 100, .save_secs = 600.0};

int main() {}
