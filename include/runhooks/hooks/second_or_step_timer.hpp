// SecondOrStepTimer: TensorFlow's "every N steps or every T seconds" trigger, with a clock policy.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>

#include <runhooks/clock.hpp>
#include <runhooks/detail/checked.hpp>

namespace runhooks {

struct TimerOptions {
  std::optional<double> every_secs{};
  std::optional<std::int64_t> every_steps{};
};

// What update_last_triggered_step() returns: nothing on the first trigger, then the seconds and
// steps since the previous one.
struct TimerElapsed {
  std::optional<double> secs;
  std::optional<std::int64_t> steps;
  friend bool operator==(const TimerElapsed&, const TimerElapsed&) = default;
};

// TensorFlow's algorithm and messages: exactly one of every_secs and every_steps (or, beyond
// TensorFlow, both through whichever_first()); a step never re-triggers itself; the thresholds
// are inclusive; no sign checks. Two differences: a step below the last triggered one triggers
// (the global step went back, e.g. on recovery: TensorFlow stays silent until the step passes
// the old trigger again), and the step threshold saturates instead of overflowing.
template <Clock C = SteadyClock>
class SecondOrStepTimer {
 public:
  explicit SecondOrStepTimer(TimerOptions options, C clock = {})
      : every_secs_(options.every_secs), every_steps_(options.every_steps),
        clock_(std::move(clock)) {
    if (!every_secs_ && !every_steps_)
      throw std::invalid_argument("Either every_secs or every_steps should be provided.");
    if (every_secs_ && every_steps_)
      throw std::invalid_argument("Can not provide both every_secs and every_steps.");
  }

  // Triggers at every_steps steps or every_secs seconds, whichever comes first (TensorFlow
  // refuses this combination).
  static SecondOrStepTimer whichever_first(double every_secs, std::int64_t every_steps,
                                           C clock = {}) {
    SecondOrStepTimer timer(TimerOptions{.every_secs = every_secs}, std::move(clock));
    timer.every_steps_ = every_steps;
    return timer;
  }

  void reset() noexcept { triggered_ = false; }

  bool should_trigger_for_step(std::int64_t step) {
    if (!triggered_) return true;
    if (last_triggered_step_ == step) return false;
    if (step < last_triggered_step_) return true;
    if (every_secs_ && clock_.now() >= last_triggered_time_ + *every_secs_) return true;
    if (every_steps_ && step >= detail::saturating_add(last_triggered_step_, *every_steps_))
      return true;
    return false;
  }

  TimerElapsed update_last_triggered_step(std::int64_t step) {
    const double now = clock_.now();
    TimerElapsed elapsed;
    if (triggered_)
      elapsed = {now - last_triggered_time_, detail::saturating_sub(step, last_triggered_step_)};
    triggered_ = true;
    last_triggered_time_ = now;
    last_triggered_step_ = step;
    return elapsed;
  }

  std::optional<std::int64_t> last_triggered_step() const noexcept {
    return triggered_ ? std::optional(last_triggered_step_) : std::nullopt;
  }
  std::optional<double> every_secs() const noexcept { return every_secs_; }
  std::optional<std::int64_t> every_steps() const noexcept { return every_steps_; }
  C& clock() noexcept { return clock_; }

 private:
  std::optional<double> every_secs_;
  std::optional<std::int64_t> every_steps_;
  // Plain fields and one flag rather than two optionals: the same state, and GCC's
  // -Wmaybe-uninitialized cannot follow optionals through inlined copies.
  bool triggered_ = false;
  std::int64_t last_triggered_step_ = 0;
  double last_triggered_time_ = 0.0;
  [[no_unique_address]] C clock_;
};

// A timer that never fires (TensorFlow's NeverTriggerTimer).
struct NeverTriggerTimer {
  static constexpr void reset() noexcept {}
  static constexpr bool should_trigger_for_step(std::int64_t) noexcept { return false; }
  static constexpr TimerElapsed update_last_triggered_step(std::int64_t) noexcept { return {}; }
  static constexpr std::optional<std::int64_t> last_triggered_step() noexcept { return {}; }
};

}  // namespace runhooks
