// What `./dev demo` runs: logistic regression trained by mini-batch SGD under a MonitoredSession.
//
// The backend knows nothing about stopping, logging or schedules; the hooks add them:
//   StopAtStepHook            ends training after a fixed number of steps (built in)
//   StepCounterHook           logs global steps per second (built in)
//   LearningRateScheduleHook  feeds a decaying learning rate before every step (ours)
//   LossLoggingHook           fetches the full-data loss every few steps and logs it (ours)
// The run checks itself: it fails unless the loss fell well below its start and the model
// classifies the data about as well as the true weights do.
#include <runhooks/runhooks.hpp>

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

constexpr std::size_t num_features = 6;
using Weights = std::array<double, num_features + 1>;  // the last entry is the bias

struct Example {
  std::array<double, num_features> x;
  double label;  // 0 or 1
};

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

double logit(const Weights& w, const Example& e) {
  double z = w[num_features];
  for (std::size_t j = 0; j < num_features; ++j) z += w[j] * e.x[j];
  return z;
}

// Standard normal features; labels drawn from the logistic model with the true weights, so the
// true weights are the best any model can do on average.
std::vector<Example> make_data(const Weights& true_weights, std::size_t n, std::mt19937& rng) {
  std::normal_distribution<double> feature;
  std::uniform_real_distribution<double> coin;
  std::vector<Example> data(n);
  for (Example& e : data) {
    for (double& x : e.x) x = feature(rng);
    e.label = coin(rng) < sigmoid(logit(true_weights, e)) ? 1.0 : 0.0;
  }
  return data;
}

double accuracy(const Weights& w, const std::vector<Example>& data) {
  std::size_t correct = 0;
  for (const Example& e : data) correct += (logit(w, e) > 0.0) == (e.label > 0.5);
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

// Keys: names for what hooks may read from the backend and write into it.
struct Loss : runhooks::Key<float> {};          // mean log loss over the whole data set
struct LearningRate : runhooks::Key<float> {};  // step size of the next SGD step

// The backend: one run() is one SGD step on a mini-batch drawn at random.
class LogisticRegression {
 public:
  LogisticRegression(std::vector<Example> data, std::size_t batch_size, unsigned seed)
      : data_(std::move(data)), batch_size_(batch_size), rng_(seed) {}

  void run() {
    std::uniform_int_distribution<std::size_t> pick(0, data_.size() - 1);
    Weights gradient{};
    for (std::size_t i = 0; i < batch_size_; ++i) {
      const Example& e = data_[pick(rng_)];
      const double error = sigmoid(logit(weights_, e)) - e.label;
      for (std::size_t j = 0; j < num_features; ++j) gradient[j] += error * e.x[j];
      gradient[num_features] += error;
    }
    for (std::size_t j = 0; j <= num_features; ++j)
      weights_[j] -= learning_rate_ * gradient[j] / static_cast<double>(batch_size_);
    ++global_step_;
  }
  std::int64_t global_step() const { return global_step_; }

  // A full pass over the data: costly next to a step, so a hook should not ask for it every
  // step (see LossLoggingHook).
  float fetch(Loss) const {
    double sum = 0.0;
    for (const Example& e : data_) {
      const double p = sigmoid(logit(weights_, e));
      sum -= e.label > 0.5 ? std::log(p) : std::log1p(-p);
    }
    return static_cast<float>(sum / static_cast<double>(data_.size()));
  }
  void feed(LearningRate, float rate) { learning_rate_ = rate; }

  const Weights& weights() const { return weights_; }
  const std::vector<Example>& data() const { return data_; }

 private:
  std::vector<Example> data_;
  std::size_t batch_size_;
  std::mt19937 rng_;
  Weights weights_{};
  double learning_rate_ = 0.1;
  std::int64_t global_step_ = 0;
};

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
