// The backend of examples/demo.cpp and examples/resume.cpp (and of the crash-resume tests):
// logistic regression trained by mini-batch SGD, one step per run(), checkpointable.
//
// Its training state is what save() writes: the weights, the learning rate, the global step and
// the position in the data (the state of the generator that draws the mini-batches), plus an
// optional block of extra parameters that stands in for a bigger model. The data set itself is
// not state: the factory rebuilds it from its seed.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/session_run_args.hpp>

namespace demo {

constexpr std::size_t num_features = 6;
using Weights = std::array<double, num_features + 1>;  // the last entry is the bias

struct Example {
  std::array<double, num_features> x;
  double label;  // 0 or 1
};

inline double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

inline double logit(const Weights& w, const Example& e) {
  double z = w[num_features];
  for (std::size_t j = 0; j < num_features; ++j) z += w[j] * e.x[j];
  return z;
}

// Standard normal features; labels drawn from the logistic model with the true weights, so the
// true weights are the best any model can do on average.
inline std::vector<Example> make_data(const Weights& true_weights, std::size_t n, std::mt19937& rng) {
  std::normal_distribution<double> feature;
  std::uniform_real_distribution<double> coin;
  std::vector<Example> data(n);
  for (Example& e : data) {
    for (double& x : e.x) x = feature(rng);
    e.label = coin(rng) < sigmoid(logit(true_weights, e)) ? 1.0 : 0.0;
  }
  return data;
}

inline double accuracy(const Weights& w, const std::vector<Example>& data) {
  std::size_t correct = 0;
  for (const Example& e : data) correct += (logit(w, e) > 0.0) == (e.label > 0.5);
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

// Keys: names for what hooks may read from the backend and write into it.
struct Loss : runhooks::Key<float> {};          // mean log loss over the whole data set
struct LearningRate : runhooks::Key<float> {};  // step size of the next SGD step

// What a checkpoint holds, as flat arrays in one file, <prefix>.arrays.
struct TrainingState {
  Weights weights{};
  double learning_rate = 0.1;
  std::int64_t global_step = 0;
  std::string generator;        // the mini-batch generator's state, as std::mt19937 prints it
  std::vector<double> extra;    // stand-in for more parameters

  void write(const std::filesystem::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("weights", weights);
    out.add("learning_rate", learning_rate);
    out.add("global_step", global_step);
    out.add("generator", std::span<const std::uint8_t>(
                             reinterpret_cast<const std::uint8_t*>(generator.data()), generator.size()));
    out.add("extra", extra);
    out.close();
  }

  static TrainingState read(const std::filesystem::path& prefix, std::size_t extra_size) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    TrainingState state;
    in.read("weights", state.weights);
    state.learning_rate = in.scalar<double>("learning_rate");
    state.global_step = in.scalar<std::int64_t>("global_step");
    const std::vector<std::uint8_t> generator = in.get<std::uint8_t>("generator");
    state.generator.assign(generator.begin(), generator.end());
    state.extra.resize(extra_size);
    in.read("extra", state.extra);
    return state;
  }
};

// The backend: one run() is one SGD step on a mini-batch drawn at random.
class LogisticRegression {
 public:
  LogisticRegression(std::vector<Example> data, std::size_t batch_size, unsigned seed,
                     std::size_t extra_parameters = 0)
      : data_(std::move(data)), batch_size_(batch_size), rng_(seed), extra_(extra_parameters) {}

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
    if (!extra_.empty())  // touch the extra parameters, so that they are state too
      extra_[static_cast<std::size_t>(global_step_) % extra_.size()] += weights_[0];
    ++global_step_;
  }
  std::int64_t global_step() const { return global_step_; }

  // A full pass over the data: costly next to a step, so a hook should not ask for it every
  // step (see LossLoggingHook in demo.cpp).
  float fetch(Loss) const {
    double sum = 0.0;
    for (const Example& e : data_) {
      const double p = sigmoid(logit(weights_, e));
      sum -= e.label > 0.5 ? std::log(p) : std::log1p(-p);
    }
    return static_cast<float>(sum / static_cast<double>(data_.size()));
  }
  void feed(LearningRate, float rate) { learning_rate_ = rate; }

  // Checkpointable (<runhooks/checkpoint/checkpointable.hpp>): the training state to
  // <prefix>.arrays and back. A restore reads and checks the whole file before changing anything.
  void save(const std::filesystem::path& prefix) const { snapshot().write(prefix); }
  void restore(const std::filesystem::path& prefix) {
    TrainingState state = TrainingState::read(prefix, extra_.size());
    std::istringstream generator(state.generator);
    std::mt19937 rng;
    if (!(generator >> rng))
      throw std::runtime_error("the generator state in " + prefix.string() + ".arrays is unreadable");
    weights_ = state.weights;
    learning_rate_ = state.learning_rate;
    global_step_ = state.global_step;
    rng_ = rng;
    extra_ = std::move(state.extra);
  }
  // Snapshottable: a copy of the state, written later on the saver's thread.
  TrainingState snapshot() const {
    std::ostringstream generator;
    generator << rng_;
    return TrainingState{weights_, learning_rate_, global_step_, generator.str(), extra_};
  }

  const Weights& weights() const { return weights_; }
  const std::vector<Example>& data() const { return data_; }
  const std::vector<double>& extra() const { return extra_; }

 private:
  std::vector<Example> data_;
  std::size_t batch_size_;
  std::mt19937 rng_;
  std::vector<double> extra_;
  Weights weights_{};
  double learning_rate_ = 0.1;
  std::int64_t global_step_ = 0;
};

}  // namespace demo
