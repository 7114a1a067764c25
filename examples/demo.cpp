// What `./dev demo` runs: logistic regression trained by mini-batch SGD under a MonitoredSession.
//
// The backend (logistic_regression.hpp, also what examples/resume.cpp checkpoints) knows nothing
// about stopping, logging or schedules; the hooks add them:
//   StopAtStepHook            ends training after a fixed number of steps (built in)
//   StepCounterHook           logs global steps per second, and charts it for TensorBoard (built in)
//   LearningRateScheduleHook  feeds a decaying learning rate before every step (ours)
//   LoggingTensorHook         logs the full-data loss every 1000 steps (TensorFlow's)
//   NanTensorHook             stops with an error if the loss is ever NaN (TensorFlow's)
//   EarlyStoppingHook         stops once the loss stops improving (Keras')
//   SummarySaverHook          writes the loss and a histogram of the weights for TensorBoard
//   ProgressBarHook           a progress bar on a terminal, plain lines in a log
// The run checks itself: with 1000 steps or more (the default is 3000) it fails unless the loss
// fell well below its start, the model classifies the data about as well as the true weights do,
// and every learned weight is within 0.5 of the true one.
//
//   demo [--steps N] [--logdir DIR]      (demo --help)
//
// The TensorBoard files go to DIR, by default to a new directory next to the executable
// (run_directory.hpp: build/demo/examples/demo-runs/run-YYYYMMDD-HHMMSS after `./dev demo`),
// kept; the last line printed is the command that shows them, `tensorboard --logdir DIR`.
#include <runhooks/runhooks.hpp>

#include "logistic_regression.hpp"

#include "run_directory.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
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

// The command line, parsed strictly: an unknown argument or a bad value is a usage error (exit 2)
// that names it, never ignored.
struct Options {
  std::int64_t steps = 3000;
  std::optional<std::filesystem::path> logdir;  // empty: a new run directory (run_directory.hpp)
};

constexpr const char* usage_text =
    "usage: demo [--steps N] [--logdir DIR]\n"
    "  Trains a logistic regression under a MonitoredSession and checks what it learned.\n"
    "  --steps N     the last global step, a positive integer (default 3000; early stopping may\n"
    "                end the run sooner)\n"
    "  --logdir DIR  write the TensorBoard files into DIR (default: a new directory\n"
    "                demo-runs/run-YYYYMMDD-HHMMSS next to this executable, kept)\n"
    "  The last line printed is `tensorboard --logdir DIR`, the command that shows the run.\n";

// Returns the options, or the exit status when there is nothing to run (--help: 0, a mistake: 2).
std::variant<Options, int> parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      return 0;
    }
    if (arg != "--steps" && arg != "--logdir") {
      std::fprintf(stderr, "demo: unknown argument '%s'; see demo --help\n", argv[i]);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "demo: %s needs a value; see demo --help\n", argv[i]);
      return 2;
    }
    const std::string_view value = argv[++i];
    if (arg == "--steps") {
      std::int64_t steps = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), steps);
      if (error != std::errc{} || end != value.data() + value.size() || steps < 1) {
        std::fprintf(stderr, "demo: --steps must be a positive integer, got '%s'\n", argv[i]);
        return 2;
      }
      options.steps = steps;
    } else {
      if (value.empty()) {
        std::fprintf(stderr, "demo: --logdir must be a directory, got ''\n");
        return 2;
      }
      options.logdir = std::filesystem::path(value);
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const std::variant<Options, int> parsed = parse(argc, argv);
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  const Options& options = std::get<Options>(parsed);

  // Every log line (ours and the built-in hooks') to stdout, so they interleave with the
  // summary printed below in the order they happen. On a terminal, runhooks::log erases the
  // progress bar (on stderr) before the sink prints and redraws it below, as tqdm.write does.
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::printf("%.*s\n", static_cast<int>(line.size()), line.data());
    std::fflush(stdout);
  });
  // TensorBoard files: `tensorboard --logdir DIR` shows them while the demo runs, and after.
  std::filesystem::path logdir;
  try {
    logdir = options.logdir ? *options.logdir : example_runs::new_run_directory();
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "demo: cannot make a run directory (%s); pass --logdir DIR\n", e.what());
    return 1;
  }
  std::printf("TensorBoard files in %s\n", example_runs::display_path(logdir).c_str());

  const std::int64_t num_steps = options.steps;
  const Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
  std::mt19937 rng(2024);
  std::vector<Example> data = make_data(true_weights, 4000, rng);

  runhooks::EarlyStoppingHook<Loss> early_stopping({.min_delta = 1e-4, .patience = 3, .every_n_iter = 100});
  runhooks::MonitoredSession session{
      Model(std::move(data), /*batch_size=*/16, /*seed=*/7),
      runhooks::StopAtStepHook({.num_steps = num_steps}),
      // The log line and TensorBoard's global_step/sec chart, as TensorFlow's output_dir gives.
      runhooks::StepCounterHook({.every_n_steps = 1000}, runhooks::SummaryOutput(logdir)),
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
  // Every end(): the summaries flushed, and in a log the progress bar's last line (on a terminal
  // the bar drew it as the loop ended).
  session.close();

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

  // All the steps, or fewer when early stopping ended the run; what was learned only from
  // checked_from steps on (with 900 steps the weights are not yet within 0.5 of the true ones).
  constexpr std::int64_t checked_from = 1000;
  bool ok = model.global_step() == num_steps || early_stopping.stopped_step().has_value();
  if (num_steps >= checked_from) {
    ok = ok && final_loss < 0.6f * initial_loss;
    ok = ok && learned_accuracy > 0.8 && learned_accuracy > true_accuracy - 0.02;
    for (std::size_t j = 0; j <= num_features; ++j)
      ok = ok && std::abs(model.weights()[j] - true_weights[j]) < 0.5;
    if (!ok) std::printf("FAILED: the model did not learn what it should have\n");
  } else {
    if (!ok)
      std::printf("FAILED: the run ended before step %lld\n", static_cast<long long>(num_steps));
    std::printf("(what the model learned is checked only with --steps %lld or more)\n",
                static_cast<long long>(checked_from));
  }
  std::printf("TensorBoard shows the loss, the weights and the step rate (pip install tensorboard):\n");
  std::printf("%s\n", example_runs::tensorboard_command(logdir).c_str());
  return ok ? 0 : 1;
}
