// What `./dev demo` runs: logistic regression trained by mini-batch SGD under a MonitoredSession.
//
// The backend (logistic_regression.hpp, also what examples/resume.cpp checkpoints) knows nothing
// about stopping, logging or schedules; the hooks add them:
//   StopAtStepHook            ends training after a fixed number of steps (built in)
//   StepCounterHook           logs global steps per second (built in)
//   LearningRateScheduleHook  feeds a decaying learning rate before every step (ours)
//   LoggingTensorHook         logs the full-data loss every 1000 steps (TensorFlow's)
//   NanTensorHook             stops with an error if the loss is ever NaN (TensorFlow's)
//   EarlyStoppingHook         stops once the loss stops improving (Keras')
//   SummarySaverHook          writes the loss and a histogram of the weights for TensorBoard
//   ProgressBarHook           a progress bar on a terminal, plain lines in a log
// The run checks itself: it fails unless the loss fell well below its start and the model
// classifies the data about as well as the true weights do.
#include <runhooks/runhooks.hpp>

#include "logistic_regression.hpp"

#include <array>
#include <cmath>
#include <filesystem>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <system_error>

#include <unistd.h>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using demo::accuracy;
using demo::Example;
using demo::LearningRate;
using demo::LogisticRegression;
using demo::Loss;
using demo::make_data;
using demo::num_features;
using demo::Weights;

// Feeds rate = initial / (1 + step / decay_steps) before every step. Returning a feed from
// before_run is all it takes; the session hands it to the backend before run().
struct LearningRateScheduleHook {
  float initial;
  float decay_steps;

  auto before_run(auto& run_context) const {
    const auto step = static_cast<float>(run_context.session().global_step());
    const float rate = initial / (1.0f + step / decay_steps);
    return runhooks::SessionRunArgs{runhooks::feed<LearningRate>(rate)};
  }
};

// The weights, for a histogram in TensorBoard: a key the demo adds to the backend.
struct WeightValues : runhooks::Key<Weights> {
  static constexpr std::string_view name = "weights";
};
struct Model : LogisticRegression {
  using LogisticRegression::LogisticRegression;
  using LogisticRegression::fetch;
  Weights fetch(WeightValues) const { return weights(); }
};

bool stdout_is_terminal() { return ::isatty(::fileno(stdout)) == 1; }

}  // namespace

int main(int argc, char** argv) {
  // --logdir DIR keeps the TensorBoard files in DIR; without it they go to a temporary directory,
  // removed at the end.
  std::optional<std::filesystem::path> kept_logdir;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("usage: demo [--logdir DIR]\n  trains a logistic regression under a MonitoredSession; "
                  "--logdir keeps its TensorBoard files in DIR (default: a temporary directory, "
                  "removed at the end)\n");
      return 0;
    }
    if (arg == "--logdir") {
      if (i + 1 >= argc || std::string_view(argv[i + 1]).empty()) {
        std::fprintf(stderr, "demo: --logdir needs a directory\n");
        return 2;
      }
      kept_logdir = argv[++i];
      continue;
    }
    std::fprintf(stderr, "demo: unknown argument '%s' (demo --help says what it takes)\n", argv[i]);
    return 2;
  }

  // Every log line (ours and the built-in hooks') to stdout, so they interleave with the
  // summary printed below in the order they happen. On a terminal a line first erases the
  // progress bar (on stderr), which redraws below it, as tqdm.write does.
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::fflush(stderr);
    std::printf("%s%.*s\n", stdout_is_terminal() ? "\r\x1b[K" : "", static_cast<int>(line.size()),
                line.data());
    std::fflush(stdout);
  });
  // TensorBoard files: `tensorboard --logdir DIR` shows them while the demo runs.
  const std::filesystem::path logdir =
      kept_logdir ? *kept_logdir
                  : std::filesystem::temp_directory_path() /
                        ("runhooks-demo-" + std::to_string(std::random_device{}()));
  std::printf("TensorBoard files in %s%s\n", logdir.c_str(),
              kept_logdir ? "" : " (removed at the end; --logdir DIR keeps them)");

  constexpr std::int64_t num_steps = 3000;
  const Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
  std::mt19937 rng(2024);
  std::vector<Example> data = make_data(true_weights, 4000, rng);

  runhooks::EarlyStoppingHook<Loss> early_stopping({.min_delta = 1e-4, .patience = 3, .every_n_iter = 100});
  runhooks::MonitoredSession session{
      Model(std::move(data), /*batch_size=*/16, /*seed=*/7),
      runhooks::StopAtStepHook({.num_steps = num_steps}),
      runhooks::StepCounterHook({.every_n_steps = 1000}),
      LearningRateScheduleHook{.initial = 0.1f, .decay_steps = 1000.0f},
      // The full-data loss is fetched only on the steps that use it: every 1000 steps for the
      // log, 500 for TensorBoard, 100 for early stopping; NanTensorHook checks every step.
      runhooks::LoggingTensorHook{runhooks::keys<Loss>, {.every_n_iter = 1000}},
      runhooks::NanTensorHook<Loss>(),
      std::ref(early_stopping),  // kept outside the session, to read its best loss afterwards
      runhooks::SummarySaverHook{{.save_steps = 500}, logdir, runhooks::scalars<Loss>,
                                 runhooks::histograms<WeightValues>},
      runhooks::ProgressBarHook{runhooks::keys<Loss>, {.redraws_per_sec = 10}},
  };
  runhooks::link_hooks(session);  // the progress bar's total: StopAtStepHook's last step

  // raw_session() is the backend itself: reading it here runs no hook and no step.
  const float initial_loss = session.raw_session().fetch(Loss{});
  std::printf("initial loss %.4f\n", double{initial_loss});

  while (!session.should_stop()) session.run();
  session.close();  // every end(): the progress bar's last line, the summaries flushed
  if (!kept_logdir) {
    std::error_code ignored;
    std::filesystem::remove_all(logdir, ignored);
  }

  const LogisticRegression& model = session.raw_session();
  std::printf("after %lld steps:\n", static_cast<long long>(model.global_step()));
  std::printf("  weight   true  learned\n");
  for (std::size_t j = 0; j <= num_features; ++j) {
    const std::string name = j < num_features ? "w" + std::to_string(j) : "bias";
    std::printf("  %-6s %6.2f %8.2f\n", name.c_str(), true_weights[j], model.weights()[j]);
  }

  const double learned_accuracy = accuracy(model.weights(), model.data());
  const double true_accuracy = accuracy(true_weights, model.data());
  const float final_loss = session.raw_session().fetch(Loss{});
  std::printf("loss %.4f -> %.4f; accuracy %.3f (the true weights: %.3f)\n", double{initial_loss},
              double{final_loss}, learned_accuracy, true_accuracy);

  // All the steps, or fewer when early stopping ended the run.
  bool ok = model.global_step() == num_steps || early_stopping.stopped_step().has_value();
  ok = ok && final_loss < 0.6f * initial_loss;
  ok = ok && learned_accuracy > 0.8 && learned_accuracy > true_accuracy - 0.02;
  for (std::size_t j = 0; j <= num_features; ++j)
    ok = ok && std::abs(model.weights()[j] - true_weights[j]) < 0.5;
  if (!ok) {
    std::printf("FAILED: the model did not learn what it should have\n");
    return 1;
  }
  return 0;
}
