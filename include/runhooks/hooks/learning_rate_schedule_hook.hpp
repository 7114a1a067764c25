// LearningRateScheduleHook: sets the backend's learning rate from a function of the global step,
// with two schedules (warmup + cosine decay, step decay).
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/hooks/learning_rate.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

struct LearningRateScheduleOptions {
  // The schedule is evaluated before the runs that start at a multiple of this many global steps
  // past the last evaluation (1: before every run). At least 1.
  std::int64_t every_n_steps = 1;

  constexpr const LearningRateScheduleOptions& validate() const {
    if (every_n_steps < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: LearningRateScheduleOptions::every_n_steps must be at least 1";
      throw std::invalid_argument("runhooks: LearningRateScheduleOptions::every_n_steps must be at least 1, got " +
                                  std::to_string(every_n_steps) + ".");
    }
    return *this;
  }
};

// Sets the backend's rate (HasLearningRate) to schedule(global_step) before a run, the global step
// being the one before the run (so the first step of a fresh run uses schedule(0), as a PyTorch
// scheduler's initial rate), on the first run of each session and then every every_n_steps global
// steps. Keras' LearningRateScheduler and PyTorch's LambdaLR, by global step instead of epoch.
// A result that is NaN, infinite or negative throws std::invalid_argument naming the step and
// the value (Keras raises for a non-float). After a recovery the next run evaluates again, for the
// restored step. Per silent step: one compare of the global step (the session reads it once per
// run for every hook) with the next evaluation step.
template <class Schedule>
  requires std::invocable<Schedule&, std::int64_t> &&
           std::convertible_to<std::invoke_result_t<Schedule&, std::int64_t>, double>
class LearningRateScheduleHook {
 public:
  explicit LearningRateScheduleHook(Schedule schedule, LearningRateScheduleOptions options = {})
      : schedule_(std::move(schedule)), options_(options.validate()) {}

  void begin() noexcept { next_ = std::numeric_limits<std::int64_t>::min(); }

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::LearningRateScheduleHook needs a backend with `std::int64_t "
                  "global_step() const`; the backend type is named in this instantiation.");
    static_assert(detail::check_learning_rate<LearningRateScheduleHook, Backend>());
    next_ = std::numeric_limits<std::int64_t>::min();  // a recovery may have moved the step back
  }

  template <class Ctx>
  void before_run(Ctx& run_context) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (HasGlobalStep<Backend> && HasLearningRate<Backend>) {
      const std::int64_t step = detail::global_step_of(run_context);
      if (step >= next_) [[unlikely]]
        apply(step, run_context.session());
    }
  }

  const LearningRateScheduleOptions& options() const noexcept { return options_; }
  Schedule& schedule() noexcept { return schedule_; }
  // The last rate set, and at which global step (NaN and min before the first).
  double last_rate() const noexcept { return last_rate_; }

 private:
  template <class Backend>
  [[gnu::noinline]] void apply(std::int64_t step, Backend& backend) {
    const double rate = static_cast<double>(schedule_(step));
    if (!(rate >= 0.0 && rate <= std::numeric_limits<double>::max()))
      throw std::invalid_argument("runhooks: LearningRateScheduleHook: the schedule gave " +
                                  detail::format_number(rate) + " at global step " +
                                  std::to_string(step) +
                                  "; a learning rate must be a finite number at least 0.");
    backend.set_learning_rate(rate);
    last_rate_ = rate;
    next_ = detail::saturating_add(step, options_.every_n_steps);
  }

  Schedule schedule_;
  LearningRateScheduleOptions options_;
  std::int64_t next_ = std::numeric_limits<std::int64_t>::min();
  double last_rate_ = std::numeric_limits<double>::quiet_NaN();
};

// ---- Schedules ------------------------------------------------------------------------------

struct WarmupCosineDecayOptions {
  double peak_lr = 0.0;            // reached at the end of the warmup; greater than 0
  std::int64_t warmup_steps = 0;   // linear from 0 (exclusive) to peak_lr; at least 0
  std::int64_t decay_steps = 1;    // cosine from peak_lr to final_lr after the warmup; at least 1
  double final_lr = 0.0;           // held after the decay; at least 0, at most peak_lr
};

// The usual transformer schedule: rate(step) = peak_lr * (step + 1) / warmup_steps during the
// warmup, then final_lr + (peak_lr - final_lr) * (1 + cos(pi * t)) / 2 for t going from 0 to 1
// over decay_steps, then final_lr. Options checked when made (std::invalid_argument).
class WarmupCosineDecay {
 public:
  explicit WarmupCosineDecay(WarmupCosineDecayOptions options) : o_(options) {
    if (!(o_.peak_lr > 0.0 && o_.peak_lr <= 1e300))
      throw std::invalid_argument("runhooks: WarmupCosineDecayOptions::peak_lr must be a finite number greater than 0, got " +
                                  detail::format_number(o_.peak_lr) + ".");
    if (o_.warmup_steps < 0)
      throw std::invalid_argument("runhooks: WarmupCosineDecayOptions::warmup_steps must be at least 0, got " +
                                  std::to_string(o_.warmup_steps) + ".");
    if (o_.decay_steps < 1)
      throw std::invalid_argument("runhooks: WarmupCosineDecayOptions::decay_steps must be at least 1, got " +
                                  std::to_string(o_.decay_steps) + ".");
    if (!(o_.final_lr >= 0.0 && o_.final_lr <= o_.peak_lr))
      throw std::invalid_argument("runhooks: WarmupCosineDecayOptions::final_lr must be at least 0 and at most peak_lr (" +
                                  detail::format_number(o_.peak_lr) + "), got " +
                                  detail::format_number(o_.final_lr) + ".");
  }
  double operator()(std::int64_t step) const noexcept {
    if (step < o_.warmup_steps)
      return o_.peak_lr * static_cast<double>(step + 1) / static_cast<double>(o_.warmup_steps);
    const double t = static_cast<double>(step - o_.warmup_steps) / static_cast<double>(o_.decay_steps);
    if (t >= 1.0) return o_.final_lr;
    return o_.final_lr + (o_.peak_lr - o_.final_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
  }
  const WarmupCosineDecayOptions& options() const noexcept { return o_; }

 private:
  WarmupCosineDecayOptions o_;
};

struct StepDecayOptions {
  double initial_lr = 0.0;       // greater than 0
  std::int64_t step_size = 1;    // steps between decays; at least 1
  double gamma = 0.1;            // the factor of each decay; at least 0 and at most 1
};

// PyTorch's StepLR by global step: rate(step) = initial_lr * gamma^(step / step_size).
class StepDecay {
 public:
  explicit StepDecay(StepDecayOptions options) : o_(options) {
    if (!(o_.initial_lr > 0.0 && o_.initial_lr <= 1e300))
      throw std::invalid_argument("runhooks: StepDecayOptions::initial_lr must be a finite number greater than 0, got " +
                                  detail::format_number(o_.initial_lr) + ".");
    if (o_.step_size < 1)
      throw std::invalid_argument("runhooks: StepDecayOptions::step_size must be at least 1, got " +
                                  std::to_string(o_.step_size) + ".");
    if (!(o_.gamma >= 0.0 && o_.gamma <= 1.0))
      throw std::invalid_argument("runhooks: StepDecayOptions::gamma must be at least 0 and at most 1, got " +
                                  detail::format_number(o_.gamma) + ".");
  }
  double operator()(std::int64_t step) const noexcept {
    return o_.initial_lr * std::pow(o_.gamma, static_cast<double>(step < 0 ? 0 : step / o_.step_size));
  }
  const StepDecayOptions& options() const noexcept { return o_; }

 private:
  StepDecayOptions o_;
};

}  // namespace runhooks
