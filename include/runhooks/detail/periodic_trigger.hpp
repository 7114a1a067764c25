// The trigger of the periodic hooks (LoggingTensorHook, SummarySaverHook, ProfilerHook,
// ProgressBarHook): TensorFlow's SecondOrStepTimer over a count, a global step or a local
// iteration, tested with one compare per step.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include <runhooks/clock.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>

namespace runhooks::detail {

// The sampling stride of an every-N-seconds trigger: how many counts to let pass before the
// clock is read again, so that it is read about 64 times per period. Re-estimated at each sample
// from the rate since the last one: 1 while the rate is unknown, growing at most fourfold per
// sample. A trigger is then at most about 1/64 of a period late while the rate is steady.
class ClockSampler {
 public:
  std::int64_t stride(std::int64_t count, double now, double every_secs) noexcept {
    std::int64_t steps = 1;
    if (last_count_ != min && now > last_time_ && count > last_count_) {
      const double rate = static_cast<double>(count - last_count_) / (now - last_time_);
      const double wanted = rate * every_secs / samples_per_period;
      const double most = 4.0 * static_cast<double>(last_stride_);
      const double capped = wanted < most ? wanted : most;
      steps = capped >= 1.0 ? static_cast<std::int64_t>(capped < 1e18 ? capped : 1e18) : 1;
    }
    last_time_ = now;
    last_count_ = count;
    last_stride_ = steps;
    return steps;
  }
  void reset() noexcept {
    last_count_ = min;
    last_stride_ = 1;
  }

 private:
  static constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  static constexpr double samples_per_period = 64.0;
  std::int64_t last_count_ = min;
  double last_time_ = 0.0;
  std::int64_t last_stride_ = 1;
};

// due(count) is TensorFlow's timer.should_trigger_for_step(count) and fire(count) its
// update_last_triggered_step(count), with the timer's rules (runhooks' SecondOrStepTimer). The
// per-step cost is `count >= next_check_`: the timer itself runs only once the count reaches the
// next step that could trigger.
//   - every_steps: the next check is the last trigger + every_steps, so the test is exact.
//   - every_secs: the clock is sampled, not read on every step: the next check is a stride of
//     counts ahead, re-estimated at each sample from the measured rate so that the clock is read
//     about 64 times per period (at least every count while the rate is unknown, and growing at
//     most fourfold per sample). A trigger is then at most about 1/64 of a period late while the
//     rate is steady. A count that stands still is not sampled again until it moves.
//   - never(): TensorFlow's NeverTriggerTimer; due() is always false.
// A count below the last trigger does not reach the next check; a hook whose count can go back
// (a global step restored by a recovery) calls recheck() in after_create_session, and the timer
// then triggers for it (SecondOrStepTimer's rule).
template <Clock C = SteadyClock>
class PeriodicTrigger {
 public:
  PeriodicTrigger(std::optional<std::int64_t> every_steps, std::optional<double> every_secs,
                  C clock = {})
      : timer_(TimerOptions{every_secs, every_steps}, std::move(clock)) {}

  static PeriodicTrigger never(C clock = {}) {
    PeriodicTrigger trigger(std::int64_t{1}, std::nullopt, std::move(clock));
    trigger.never_ = true;
    trigger.set_next_check(max);
    return trigger;
  }

  bool due(std::int64_t count) {
    if (count >= next_check_) [[unlikely]]
      return check(count);
    return false;
  }

  // due(count + 1), tested on count: a hook that knows the global step before a run asks about
  // the step the run will reach without an addition (or its overflow check) per step.
  bool due_after(std::int64_t count_before) {
    if (count_before >= next_check_before_) [[unlikely]]
      return check(saturating_add(count_before, 1));
    return false;
  }

  // never(): NeverTriggerTimer's update, which records nothing and returns nothing.
  TimerElapsed fire(std::int64_t count) {
    if (never_) return {};
    const TimerElapsed elapsed = timer_.update_last_triggered_step(count);
    set_next_check(timer_.every_steps() ? saturating_add(count, *timer_.every_steps())
                                        : saturating_add(count, stride(count)));
    return elapsed;
  }

  // TensorFlow's timer.reset(): the next due() triggers.
  void reset() noexcept {
    timer_.reset();
    if (!never_) set_next_check(min);
    sampler_.reset();
  }

  // Ask the timer at the next due(), whatever the count: after the count may have gone back.
  void recheck() noexcept {
    if (!never_) set_next_check(min);
  }

  // The count from which due() asks the timer again, and the one from which due_after() does.
  std::int64_t next_check() const noexcept { return next_check_; }
  std::int64_t next_check_before() const noexcept { return next_check_before_; }

  std::optional<std::int64_t> last_triggered() const noexcept {
    return timer_.last_triggered_step();
  }
  // How often every_secs mode sampled the clock; zero in every_steps mode.
  std::int64_t clock_samples() const noexcept { return clock_samples_; }
  C& clock() noexcept { return timer_.clock(); }

 private:
  static constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  static constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  [[gnu::noinline]] bool check(std::int64_t count) {
    if (timer_.every_secs()) ++clock_samples_;
    if (timer_.should_trigger_for_step(count)) return true;  // next_check_ stays: fire() moves it
    // every_steps: the timer refuses only counts from the last trigger up to the next threshold.
    if (timer_.every_steps())
      set_next_check(saturating_add(*timer_.last_triggered_step(), *timer_.every_steps()));
    else
      set_next_check(saturating_add(count, stride(count)));
    return false;
  }

  void set_next_check(std::int64_t next) noexcept {
    next_check_ = next;
    next_check_before_ = saturating_sub(next, 1);
  }

  // Counts until the next clock sample in every_secs mode.
  std::int64_t stride(std::int64_t count) {
    return sampler_.stride(count, timer_.clock().now(), *timer_.every_secs());
  }

  SecondOrStepTimer<C> timer_;
  std::int64_t next_check_ = min;
  std::int64_t next_check_before_ = min;  // next_check_ - 1: the test of due_after()
  bool never_ = false;
  ClockSampler sampler_;
  std::int64_t clock_samples_ = 0;
};

// A PeriodicTrigger over this hook's own completed runs, counted down: per step one compare
// in before_run (due()) and one decrement in after_run (count()). A run that fails between the
// two is not counted, as TensorFlow counts iterations in after_run.
template <Clock C = SteadyClock>
class IterationTrigger {
 public:
  explicit IterationTrigger(PeriodicTrigger<C> trigger) : trigger_(std::move(trigger)) {}

  bool due() {
    if (until_check_ <= 0) [[unlikely]]
      return check();
    return false;
  }
  void count() noexcept { --until_check_; }
  // Completed runs since the last reset().
  std::int64_t iterations() const noexcept { return check_at_ - until_check_; }

  TimerElapsed fire() {
    const std::int64_t now = iterations();
    const TimerElapsed elapsed = trigger_.fire(now);
    rebase(now);
    return elapsed;
  }
  void reset() noexcept {
    trigger_.reset();
    check_at_ = 0;
    until_check_ = 0;
  }
  PeriodicTrigger<C>& periodic() noexcept { return trigger_; }
  const PeriodicTrigger<C>& periodic() const noexcept { return trigger_; }

 private:
  [[gnu::noinline]] bool check() {
    const std::int64_t now = iterations();
    const bool triggers = trigger_.due(now);
    if (!triggers) rebase(now);  // a trigger stays due until fire() moves it
    return triggers;
  }
  void rebase(std::int64_t now) noexcept {
    check_at_ = trigger_.next_check();
    until_check_ = saturating_sub(check_at_, now);
  }

  PeriodicTrigger<C> trigger_;
  std::int64_t check_at_ = 0;
  std::int64_t until_check_ = 0;
};

}  // namespace runhooks::detail
