// What `./dev demo` runs: logistic regression trained by mini-batch SGD under a MonitoredSession.
//
// The backend (logistic_regression.hpp, also what examples/resume.cpp checkpoints) knows nothing
// about stopping, logging or schedules; the hooks add them:
//   StopAtStepHook            ends training after a fixed number of steps (built in)
//   StepCounterHook           logs global steps per second (built in)
//   LearningRateScheduleHook  feeds a decaying learning rate before every step (ours)
//   LossLoggingHook           fetches the full-data loss every few steps and logs it (ours)
// The run checks itself: it fails unless the loss fell well below its start and the model
// classifies the data about as well as the true weights do.
#include <runhooks/runhooks.hpp>

#include "logistic_regression.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
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

// Logs "step S loss L" every n steps, in the spirit of TensorFlow's LoggingTensorHook. The
// fetch is requested on every step but switched on only on the steps that log, so the backend
// computes the full-data loss only then; the step's type is the same either way.
class LossLoggingHook {
 public:
  explicit LossLoggingHook(std::int64_t every_n_steps) : every_n_steps_(every_n_steps) {}

  auto before_run(auto& run_context) const {
    const std::int64_t step = run_context.session().global_step() + 1;  // the step about to run
    return runhooks::SessionRunArgs{runhooks::fetch<Loss>(step % every_n_steps_ == 0)};
  }

  void after_run(auto& run_context, const auto& run_values) {
    const std::optional<float>& loss = run_values[Loss{}];
    if (!loss) return;  // not a logging step
    last_loss_ = *loss;
    // Through runhooks::log, so these lines go where StepCounterHook's go, in order.
    char line[64];
    std::snprintf(line, sizeof line, "step %lld loss %.4f",
                  static_cast<long long>(run_context.session().global_step()), double{*loss});
    runhooks::log(runhooks::Severity::info, line);
  }

  float last_loss() const { return last_loss_; }

 private:
  std::int64_t every_n_steps_;
  float last_loss_ = std::numeric_limits<float>::quiet_NaN();  // until the first log
};

}  // namespace

int main() {
  // Every log line (ours and the built-in hooks') to stdout, so they interleave with the
  // summary printed below in the order they happen.
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::printf("%.*s\n", static_cast<int>(line.size()), line.data());
  });

  constexpr std::int64_t num_steps = 3000;
  const Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
  std::mt19937 rng(2024);
  std::vector<Example> data = make_data(true_weights, 4000, rng);

  LossLoggingHook loss_logger(300);
  runhooks::MonitoredSession session{
      LogisticRegression(std::move(data), /*batch_size=*/16, /*seed=*/7),
      runhooks::StopAtStepHook({.num_steps = num_steps}),
      runhooks::StepCounterHook({.every_n_steps = 1000}),
      LearningRateScheduleHook{.initial = 0.1f, .decay_steps = 1000.0f},
      std::ref(loss_logger),  // kept outside the session, to read its last loss afterwards
  };

  // raw_session() is the backend itself: reading it here runs no hook and no step.
  const float initial_loss = session.raw_session().fetch(Loss{});
  std::printf("initial loss %.4f\n", double{initial_loss});

  while (!session.should_stop()) session.run();
  // No close() needed: the session's destructor closes it, as TensorFlow's `with` block does.

  const LogisticRegression& model = session.raw_session();
  std::printf("after %lld steps:\n", static_cast<long long>(model.global_step()));
  std::printf("  weight   true  learned\n");
  for (std::size_t j = 0; j <= num_features; ++j) {
    const std::string name = j < num_features ? "w" + std::to_string(j) : "bias";
    std::printf("  %-6s %6.2f %8.2f\n", name.c_str(), true_weights[j], model.weights()[j]);
  }

  const double learned_accuracy = accuracy(model.weights(), model.data());
  const double true_accuracy = accuracy(true_weights, model.data());
  const float final_loss = loss_logger.last_loss();
  std::printf("loss %.4f -> %.4f; accuracy %.3f (the true weights: %.3f)\n", double{initial_loss},
              double{final_loss}, learned_accuracy, true_accuracy);

  bool ok = model.global_step() == num_steps;
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
