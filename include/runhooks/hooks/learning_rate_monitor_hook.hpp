// LearningRateMonitorHook: records the backend's learning rate every N global steps.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/hooks/learning_rate.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>  // LogOutput, the output concept
#include <runhooks/session_run_context.hpp>

namespace runhooks {

struct LearningRateMonitorOptions {
  // A record after the first run of each session and then every this many global steps. At least 1.
  std::int64_t every_n_steps = 100;
  // The scalar's tag (Lightning's LearningRateMonitor writes lr-<Optimizer>, e.g. "lr-SGD").
  std::string tag = "lr";

  const LearningRateMonitorOptions& validate() const {
    if (every_n_steps < 1)
      throw std::invalid_argument("runhooks: LearningRateMonitorOptions::every_n_steps must be at least 1, got " +
                                  std::to_string(every_n_steps) + ".");
    if (tag.empty())
      throw std::invalid_argument("runhooks: LearningRateMonitorOptions::tag must not be empty.");
    return *this;
  }
};

// Lightning's LearningRateMonitor(logging_interval="step"): after a run, the backend's
// learning_rate() (HasLearningRate) goes to the output as `record(tag, rate, global_step)`, the
// outputs of StepCounterHook: LogOutput (the default: "lr: 0.01"), CsvOutput (its third column is
// then the rate), SummaryOutput (a TensorBoard scalar), CallbackOutput. Per silent step: one
// compare of the global step with the next record step.
template <class Output = LogOutput>
class LearningRateMonitorHook {
 public:
  // Output's default only where it has one: a default argument `Output output = {}` would make
  // std::is_default_constructible of a hook with a SummaryOutput (std::optional<Hook>, Conditional)
  // a hard error with clang++ instead of false.
  explicit LearningRateMonitorHook(LearningRateMonitorOptions options = {})
    requires std::default_initializable<Output>
      : LearningRateMonitorHook(std::move(options), Output{}) {}
  explicit LearningRateMonitorHook(LearningRateMonitorOptions options, Output output)
      : options_(std::move(options.validate())), output_(std::move(output)) {}
  template <class Hint = detail::write_the_options_type<
                LearningRateMonitorOptions, &LearningRateMonitorOptions::every_n_steps,
                &LearningRateMonitorOptions::tag>>
  explicit LearningRateMonitorHook(...) = delete;  // Misspelt field? Write LearningRateMonitorOptions{...} to see which

  void begin() noexcept { next_ = std::numeric_limits<std::int64_t>::min(); }

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::LearningRateMonitorHook needs a backend with `std::int64_t "
                  "global_step() const`; the backend type is named in this instantiation.");
    static_assert(detail::check_learning_rate<LearningRateMonitorHook, Backend>());
    next_ = std::numeric_limits<std::int64_t>::min();
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (HasGlobalStep<Backend> && HasLearningRate<Backend>) {
      const std::int64_t step = detail::global_step_of(run_context);
      if (step >= next_) [[unlikely]]
        record(step, static_cast<double>(run_context.session().learning_rate()));
    }
  }

  const LearningRateMonitorOptions& options() const noexcept { return options_; }
  Output& output() noexcept { return output_; }

 private:
  [[gnu::noinline]] void record(std::int64_t step, double rate) {
    output_.record(options_.tag, rate, step);
    next_ = detail::saturating_add(step, options_.every_n_steps);
  }

  LearningRateMonitorOptions options_;
  Output output_;
  std::int64_t next_ = std::numeric_limits<std::int64_t>::min();
};

LearningRateMonitorHook() -> LearningRateMonitorHook<>;

}  // namespace runhooks
