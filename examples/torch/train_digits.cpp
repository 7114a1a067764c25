// A libtorch training loop driven by a MonitoredSession: an MLP learns the 8x8 handwritten
// digits (UCI, 1,797 images, as shipped by scikit-learn) and reports its accuracy on a held-out
// split. `./dev demo-torch` fetches the data, builds this and runs it.
//
//   train_digits --data digits.csv.gz [--model-dir DIR] [--steps N] [--save-steps N]
//                [--log-every N] [--seed S]          (train_digits --help)
//
// Without --model-dir, a new directory next to the executable, kept (../run_directory.hpp:
// build/demo-torch/examples/torch/train_digits-runs/run-YYYYMMDD-HHMMSS after `./dev demo-torch`).
//
// The backend (runhooks::TorchBackend) knows nothing about stopping, logging, summaries or
// checkpoints; the hooks, all built in, add them:
//   StopAtStepHook       ends training at global step --steps
//   StepCounterHook      global steps per second every --log-every steps, logged and written
//                        to TensorBoard (an event file in --model-dir)
//   LoggingTensorHook    logs "loss = ..., accuracy = ..." of the last batch every --log-every runs
//   SummarySaverHook     writes the same two scalars to TensorBoard every --log-every steps
//   NanTensorHook        fails the run if the loss becomes NaN (it fetches the loss every step,
//                        as TensorFlow's does: one .item() per step)
//   ProgressBarHook      a progress bar on a terminal (a plain line every 30 s otherwise)
//   SignalStopHook       the first Ctrl-C (SIGINT) or SIGTERM ends training after the current
//                        step, so every end() runs, the checkpoint saver's included
//   CheckpointSaverHook  a checkpoint in --model-dir every --save-steps steps, at the start and at
//                        the end, written on a background thread
// The accuracy of a batch (argmax, compare, mean, .item()) is computed only on the steps where
// a hook fetches it: its fetches are switched off on the others, and the backend converts
// nothing it is not asked for.
//
// The backend comes from a ChiefSessionCreator, which restores the latest checkpoint of
// --model-dir: a run that was killed resumes where its last checkpoint left it and, since a
// step's batch depends on the step alone, ends with the very weights of an uninterrupted run.
// Ends with the lines `weights checksum: S`, `test accuracy: X on the held-out split (N images)`,
// a hint, and `tensorboard --logdir DIR`, the command that shows the run.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/core.hpp>
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/torch/tensor_batches.hpp>
#include <runhooks/torch/torch_backend.hpp>

#include "../run_directory.hpp"
#include "digits.hpp"  // the data, the split, the MLP and the command line, shared with train_digits_ddp

#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

namespace {

using Model = digits::Model;
using Backend = runhooks::TorchBackend<Model, torch::optim::SGD>;

constexpr const char* usage_text =
    "usage: train_digits --data digits.csv.gz [--model-dir DIR] [--steps N] [--save-steps N]\n"
    "                    [--log-every N] [--seed S]\n"
    "  Trains an MLP on the 8x8 digits under a MonitoredSession and reports its accuracy on a\n"
    "  held-out fifth of them. N and S are positive integers.\n"
    "  --data FILE       scikit-learn's digits.csv.gz (tools/fetch_digits.py fetches it)\n"
    "  --model-dir DIR   checkpoints and TensorBoard files; a run on a DIR that holds a\n"
    "                    checkpoint resumes from it (default: a new directory\n"
    "                    train_digits-runs/run-YYYYMMDD-HHMMSS next to this executable, kept)\n"
    "  --steps N         the last global step (default 1500)\n"
    "  --save-steps N    a checkpoint every N steps (default 500)\n"
    "  --log-every N     log and write the loss and accuracy every N steps (default 250)\n"
    "  --seed S          the initial weights and the order of the batches (default 1)\n"
    "  The last line printed is `tensorboard --logdir DIR`, the command that shows the run.\n";

}  // namespace

int main(int argc, char** argv) try {
  const digits::Options options =
      digits::parse(argc, argv, usage_text, {}, [](std::string_view, std::string_view) {});
  // The default model directory is made before the data is read, so that its failure is
  // reported first; an explicit one is ChiefSessionCreator's to make.
  const std::string dir =
      options.model_dir.empty() ? example_runs::new_run_directory().string() : options.model_dir;
  std::printf("model directory (checkpoints, TensorBoard files): %s\n",
              example_runs::display_path(dir).c_str());
  // Log lines to stdout. On a terminal, each first clears the line, where the progress bar (on
  // stderr) may be drawn; the bar redraws itself below.
  static const bool terminal = isatty(STDOUT_FILENO) == 1;
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::printf("%s%.*s\n", terminal ? "\r\x1b[K" : "", static_cast<int>(line.size()), line.data());
    std::fflush(stdout);
  });
  torch::set_num_threads(1);  // a small MLP: one thread is fastest, and OpenMP spins otherwise
  torch::manual_seed(options.seed);  // the initial weights

  // A fixed split: every fifth image held out, the others trained on.
  const digits::Split data = digits::split(digits::load_digits(options.data));
  const torch::Tensor& test_images = data.test_images;
  const torch::Tensor& test_labels = data.test_labels;
  const std::int64_t num_train = data.train_images.size(0), num_test = test_images.size(0);
  const runhooks::TensorBatches train_batches = digits::train_batches(data, options.seed);

  std::printf("training on %lld images, %lld held out; %lld steps of 32\n",
              static_cast<long long>(num_train), static_cast<long long>(num_test),
              static_cast<long long>(options.steps));

  // A fresh backend: at the start, and on a recovery (the creator then restores the latest
  // checkpoint into it). The seed fixes the initial weights and the order of the batches.
  const auto make_backend = [&] {
    return Backend(digits::make_model(options.seed), train_batches,
                   torch::optim::SGDOptions(0.05).momentum(0.9));
  };
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator(make_backend, {.checkpoint_dir = dir}),
      runhooks::StopAtStepHook({.last_step = options.steps}),
      runhooks::StepCounterHook({.every_n_steps = options.log_every}, runhooks::SummaryOutput(dir)),
      runhooks::LoggingTensorHook(runhooks::keys<runhooks::BatchLoss, runhooks::BatchAccuracy>,
                                  {.every_n_iter = options.log_every}),
      runhooks::SummarySaverHook({.save_steps = options.log_every}, dir,
                                 runhooks::scalars<runhooks::BatchLoss, runhooks::BatchAccuracy>),
      runhooks::NanTensorHook<runhooks::BatchLoss>(),
      runhooks::ProgressBarHook(runhooks::keys<runhooks::BatchLoss>),
      runhooks::SignalStopHook(),
      runhooks::CheckpointSaverHook({.checkpoint_dir = dir, .save_steps = options.save_steps}),
  };
  runhooks::link_hooks(session);  // the progress bar finds StopAtStepHook's last step

  const auto start = std::chrono::steady_clock::now();
  const std::int64_t first_step = session.raw_session().global_step();
  while (!session.should_stop()) session.run();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  session.close();  // every end() (the final checkpoint); their errors are thrown here

  Backend& backend = session.raw_session();
  const std::int64_t ran = backend.global_step() - first_step;
  std::printf("trained to step %lld in %.2f s (%.1f us/step); %lld tensor conversions (.item())\n",
              static_cast<long long>(backend.global_step()), secs,
              ran > 0 ? 1e6 * secs / static_cast<double>(ran) : 0.0,
              static_cast<long long>(backend.item_calls()));
  // The sum of all weights: a resumed run and an uninterrupted one end with the same.
  double checksum = 0.0;
  for (const torch::Tensor& p : backend.model()->parameters()) checksum += p.sum().item<double>();
  std::printf("weights checksum: %.9g\n", checksum);
  std::printf("test accuracy: %.4f on the held-out split (%lld images)\n",
              double{backend.accuracy(test_images, test_labels)}, static_cast<long long>(num_test));
  std::printf("TensorBoard shows the loss, the accuracy and the step rate "
              "(pip install tensorboard):\n");
  std::printf("%s\n", example_runs::tensorboard_command(dir).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_digits: %s\n", e.what());
  return 1;
}
