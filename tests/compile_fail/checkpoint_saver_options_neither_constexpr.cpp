// expect: Either every_secs or every_steps should be provided.
// CheckpointSaverOptions declared constexpr with neither save_steps nor save_secs: TensorFlow's
// error, at compile time.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>

constexpr runhooks::CheckpointSaverOptions options{.checkpoint_dir = "ckpt"};

int main() {}
