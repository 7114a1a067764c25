// expect: runhooks: TrainingSessionOptions sets both save_checkpoint_secs and save_checkpoint_steps
// TensorFlow's MonitoredTrainingSession documents that secs wins when both are given, and its code
// raises; both is a mistake, and constexpr options with it do not compile.
#include <runhooks/training_session.hpp>

constexpr runhooks::TrainingSessionOptions options{.checkpoint_dir = "ckpt",
                                                   .save_checkpoint_secs = 600,
                                                   .save_checkpoint_steps = 100};

int main() {}
