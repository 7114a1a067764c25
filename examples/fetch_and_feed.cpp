// Fetches and feeds from the caller of run() and from hooks, merged into one backend step.
//
// Everyone asks for what they need: the caller through run(SessionRunArgs{...}), each hook
// through what its before_run returns. The session feeds every input before the step, runs it
// once, and fetches after it; then each party gets back exactly the values it asked for, even
// when several ask for the same key.
#include <runhooks/runhooks.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

struct Loss : runhooks::Key<float> {};
struct Weight : runhooks::Key<float> {};
struct LearningRate : runhooks::Key<float> {};

// Gradient descent on w^2 from w = 1. At learning rate 0.25 each step halves w, so after step s
// the weight is 0.5^s and the loss 0.25^s, both exact in float.
struct Model {
  float w = 1.0f;
  float learning_rate = 0.0f;  // the caller feeds it on every step
  std::int64_t step = 0;
  mutable int fetch_calls = 0;  // counts backend reads, to show that a switched-off fetch is free

  void run() {
    w -= learning_rate * 2.0f * w;
    ++step;
  }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return ++fetch_calls, w * w; }
  float fetch(Weight) const { return ++fetch_calls, w; }
  void feed(LearningRate, float value) { learning_rate = value; }
};

// Fetches the same key as the caller; gets its own copy of the value.
struct LossWatcher {
  std::vector<float> seen;
  auto before_run(auto&) const { return runhooks::SessionRunArgs{runhooks::fetch<Loss>()}; }
  void after_run(auto&, const auto& run_values) {
    // The values' type holds this hook's fetches only: run_values[Weight{}] would not compile,
    // and neither would a key the backend cannot fetch.
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(run_values)>,
                                 runhooks::SessionRunValues<
                                     runhooks::SessionRunArgs<runhooks::Fetch<Loss>>>>);
    seen.push_back(*run_values[Loss{}]);
  }
};

// Fetches the weight on even steps only: the switch is a run-time bool, so the type of every
// step stays the same and odd steps cost no backend call.
struct EvenStepWeight {
  std::vector<std::pair<std::int64_t, std::optional<float>>> seen;
  auto before_run(auto& run_context) const {
    const bool even = (run_context.session().global_step() + 1) % 2 == 0;
    return runhooks::SessionRunArgs{runhooks::fetch<Weight>(even)};
  }
  void after_run(auto& run_context, const auto& run_values) {
    seen.emplace_back(run_context.session().global_step(), run_values[Weight{}]);
  }
};

// Asks for nothing and receives nothing, although the caller and two hooks fetch. It can still
// see what the caller passed to run(), through the run context.
struct Bystander {
  int runs = 0;
  float caller_learning_rate = 0.0f;
  void after_run(auto& run_context, const auto& run_values) {
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(run_values)>,
                                 runhooks::SessionRunValues<runhooks::SessionRunArgs<>>>);
    const auto& caller_args = run_context.original_args();
    using CallerArgs = std::remove_cvref_t<decltype(caller_args)>;
    using FeedRate = runhooks::Feed<LearningRate>;
    if constexpr (CallerArgs::template has<FeedRate>)
      caller_learning_rate = caller_args.template get<FeedRate>().value;
    ++runs;
  }
};

int main() {
  constexpr int num_steps = 6;
  runhooks::MonitoredSession session{Model{}, LossWatcher{}, EvenStepWeight{}, Bystander{},
                                     runhooks::StopAtStepHook({.num_steps = num_steps})};

  std::vector<float> caller_losses;
  while (!session.should_stop()) {
    // The caller's fetch and feed join the hooks' requests in the same step. A hook feeding
    // LearningRate as well would not compile: one input, one feeder.
    auto values = session.run(
        runhooks::SessionRunArgs{runhooks::fetch<Loss>(), runhooks::feed<LearningRate>(0.25f)});
    float loss = *values[Loss{}];
    caller_losses.push_back(loss);
  }

  // Stored hooks are reached by position, in the order they were given.
  const auto& loss_watcher = session.hook<0>();
  const auto& even_weight = session.hook<1>();
  const auto& bystander = session.hook<2>();

  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  };

  expect(caller_losses.size() == num_steps, "the caller ran every step");
  expect(loss_watcher.seen == caller_losses, "the hook and the caller see the same loss");
  float expected_loss = 1.0f;
  for (const float loss : caller_losses) {
    expected_loss *= 0.25f;  // the fed learning rate reached the backend before each step
    expect(loss == expected_loss, "loss is 0.25^step");
  }
  expect(even_weight.seen.size() == num_steps, "EvenStepWeight ran every step");
  for (const auto& [step, weight] : even_weight.seen) {
    if (weight)
      std::printf("step %lld: weight %g\n", static_cast<long long>(step), double{*weight});
    else
      std::printf("step %lld: weight not fetched\n", static_cast<long long>(step));
    expect(weight.has_value() == (step % 2 == 0), "weight fetched on even steps only");
  }
  expect(bystander.runs == num_steps && bystander.caller_learning_rate == 0.25f,
         "Bystander saw every run and the caller's feed");
  // 6 losses (the caller and LossWatcher share one read per step) + 3 even-step weights:
  // a key is read once per step however many ask, and switched-off fetches never run.
  std::printf("backend fetch calls: %d\n", session.raw_session().fetch_calls);
  expect(session.raw_session().fetch_calls == 9, "9 backend fetches");

  return failures == 0 ? 0 : 1;
}
