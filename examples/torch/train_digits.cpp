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

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <unistd.h>
#include <zlib.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace {

constexpr std::int64_t num_pixels = 64;  // 8x8, each 0..16
constexpr std::int64_t num_classes = 10;
constexpr std::int64_t num_images = 1797;
constexpr std::int64_t held_out_every = 5;  // rows 4, 9, 14, ... of the file: 359 images, 20 %

struct Options {
  std::string data;
  // Checkpoints and TensorBoard event files, as TensorFlow's model_dir; empty: a new run
  // directory next to the executable (../run_directory.hpp).
  std::string model_dir;
  std::int64_t steps = 1500;
  std::int64_t save_steps = 500;
  std::uint64_t seed = 1;
  std::int64_t log_every = 250;
};

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

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "train_digits: %s; see train_digits --help\n", message.c_str());
  std::exit(2);
}

std::int64_t positive(std::string_view name, std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < 1)
    usage_error(std::string(name) + " must be a positive integer, got '" + std::string(text) + "'");
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    }
    if (arg != "--data" && arg != "--model-dir" && arg != "--steps" && arg != "--save-steps" &&
        arg != "--seed" && arg != "--log-every")
      usage_error("unknown argument '" + std::string(arg) + "'");
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (arg == "--data") options.data = value;
    else if (arg == "--model-dir") options.model_dir = value;
    else if (arg == "--steps") options.steps = positive(arg, value);
    else if (arg == "--save-steps") options.save_steps = positive(arg, value);
    else if (arg == "--seed") options.seed = static_cast<std::uint64_t>(positive(arg, value));
    else options.log_every = positive(arg, value);
  }
  if (options.data.empty()) usage_error("--data is required (tools/fetch_digits.py fetches it)");
  return options;
}

// The whole gzip file through zlib.
std::string read_gzip(const std::string& path) {
  const std::unique_ptr<gzFile_s, decltype(&gzclose)> file(gzopen(path.c_str(), "rb"), &gzclose);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::string text;
  char buffer[1 << 16];
  for (int n; (n = gzread(file.get(), buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  int error = Z_OK;
  const char* message = gzerror(file.get(), &error);
  if (error != Z_OK && error != Z_STREAM_END)
    throw std::runtime_error("cannot read " + path + ": " + message);
  return text;
}

struct Digits {
  torch::Tensor images;  // [N, 64] float, pixels scaled to 0..1
  torch::Tensor labels;  // [N] int64
};

// scikit-learn's digits.csv.gz: one image per line, 64 pixel values then the label, no header.
Digits load_digits(const std::string& path) {
  const std::string text = read_gzip(path);
  std::vector<float> pixels;
  std::vector<std::int64_t> labels;
  pixels.reserve(num_images * num_pixels);
  std::size_t pos = 0;
  std::int64_t row = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    ++row;
    std::vector<long> values;
    std::size_t field = 0;
    while (field <= line.size()) {
      const std::size_t comma = std::min(line.find(',', field), line.size());
      const std::string cell(line.substr(field, comma - field));
      char* cell_end = nullptr;
      const double value = std::strtod(cell.c_str(), &cell_end);
      if (cell.empty() || *cell_end != '\0' || value < 0 || value > 16 || value != std::floor(value))
        throw std::runtime_error(path + ": line " + std::to_string(row) + ": not an integer 0..16: '" + cell + "'");
      values.push_back(static_cast<long>(value));
      field = comma + 1;
    }
    if (values.size() != num_pixels + 1 || values.back() >= num_classes)
      throw std::runtime_error(path + ": line " + std::to_string(row) + ": expected 64 pixels and a label 0..9");
    for (std::int64_t j = 0; j < num_pixels; ++j) pixels.push_back(static_cast<float>(values[static_cast<std::size_t>(j)]) / 16.0f);
    labels.push_back(values.back());
  }
  if (row != num_images)
    throw std::runtime_error(path + ": expected " + std::to_string(num_images) + " images, found " + std::to_string(row));
  return {torch::tensor(pixels).reshape({num_images, num_pixels}), torch::tensor(labels, torch::kLong)};
}

using Model = torch::nn::Sequential;
using Backend = runhooks::TorchBackend<Model, torch::optim::SGD>;

}  // namespace

int main(int argc, char** argv) try {
  const Options options = parse(argc, argv);
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
  const Digits digits = load_digits(options.data);
  const torch::Tensor held_out = torch::arange(num_images).remainder(held_out_every) == held_out_every - 1;
  const torch::Tensor train_rows = held_out.logical_not().nonzero().squeeze(1);
  const torch::Tensor test_rows = held_out.nonzero().squeeze(1);
  const torch::Tensor test_images = digits.images.index_select(0, test_rows);
  const torch::Tensor test_labels = digits.labels.index_select(0, test_rows);
  const std::int64_t num_train = train_rows.size(0), num_test = test_rows.size(0);
  runhooks::TensorBatches train_batches(digits.images.index_select(0, train_rows),
                                        digits.labels.index_select(0, train_rows),
                                        /*batch_size=*/32, options.seed);

  std::printf("training on %lld images, %lld held out; %lld steps of 32\n",
              static_cast<long long>(num_train), static_cast<long long>(num_test),
              static_cast<long long>(options.steps));

  // A fresh backend: at the start, and on a recovery (the creator then restores the latest
  // checkpoint into it). The seed fixes the initial weights and the order of the batches.
  const auto make_backend = [&] {
    torch::manual_seed(options.seed);
    return Backend(Model(torch::nn::Linear(num_pixels, 64), torch::nn::ReLU(),
                         torch::nn::Linear(64, num_classes)),
                   train_batches, torch::optim::SGDOptions(0.05).momentum(0.9));
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
