// StepCounterHook: measures global steps per second and hands the rate to an output policy
// (a log line, a CSV file, a callback, TensorBoard event files).
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

struct StepCounterOptions {
  // Exactly one of the two; neither means every_n_steps = 100 (TensorFlow's default).
  std::optional<std::int64_t> every_n_steps{};
  std::optional<double> every_n_secs{};
  // TensorFlow derives it from the global step's name: "<name>/sec".
  std::string tag = "global_step/sec";
};

// Output policies receive each measured rate. Minimal complete definition:
//   `void record(std::string_view tag, double steps_per_sec, std::int64_t global_step)`.
// Optional points: `void open(const StepCounterOptions&)`, called by the hook's begin();
// `void start(std::int64_t global_step)`, called once per begin() at the first run, with the
// global step after it (SummaryOutput writes SessionLog START there).
// Here: LogOutput (the default) and CallbackOutput. File outputs have their own headers:
// CsvOutput in <runhooks/outputs/csv_output.hpp>, SummaryOutput (TensorBoard event files, what
// TensorFlow's output_dir does) in <runhooks/outputs/summary_output.hpp>.

// TensorFlow's log line, "global_step/sec: 3.56742", through runhooks::log.
struct LogOutput {
  void record(std::string_view tag, double steps_per_sec, std::int64_t) const {
    char line[256];
    std::snprintf(line, sizeof line, "%.*s: %g", static_cast<int>(tag.size()), tag.data(),
                  steps_per_sec);
    log(Severity::info, line);
  }
};

// Calls f(tag, steps_per_sec, global_step).
template <class F>
struct CallbackOutput {
  F f;
  void record(std::string_view tag, double steps_per_sec, std::int64_t global_step) {
    f(tag, steps_per_sec, global_step);
  }
};
template <class F>
CallbackOutput(F) -> CallbackOutput<F>;

// Measures global steps per second every N steps or every T seconds.
//
// Per step (after_run): one compare of the global step with a precomputed threshold, and the
// "global step has not been increased" test. Everything else runs only when the threshold is
// crossed. With every_n_steps the threshold is the next trigger step; with every_n_secs it is a
// sampling stride re-estimated from the measured rate so that the clock is read about 64 times
// per period, so a trigger fires at most about 1/64 of a period late when the rate is steady.
// The first trigger records nothing; the rate is steps over seconds since the previous trigger.
// When the global step goes back (a recovery restored an older checkpoint), the hook logs once
// "global step went back from X to Y", re-bases its measurement on Y and reports on time from
// there: TensorFlow instead writes a negative rate (every_n_secs) or stays silent until the step
// passes X again (every_n_steps). Step arithmetic saturates at the limits of std::int64_t.
template <Clock C = SteadyClock, class Output = LogOutput>
class StepCounterHook {
 public:
  // Output's default only where it has one: a default argument `Output output = {}` would make
  // std::is_default_constructible of a hook with a SummaryOutput (std::optional<Hook>, Conditional)
  // a hard error with clang++ instead of false.
  explicit StepCounterHook(StepCounterOptions options = {}, C clock = {})
    requires std::default_initializable<Output>
      : StepCounterHook(std::move(options), std::move(clock), Output{}) {}
  explicit StepCounterHook(StepCounterOptions options, C clock, Output output)
      : options_(validate(std::move(options))),
        timer_(TimerOptions{options_.every_n_secs, options_.every_n_steps}, std::move(clock)),
        output_(std::move(output)) {}
  // StepCounterHook({.every_n_steps = 100}, runhooks::SummaryOutput("logs")).
  StepCounterHook(StepCounterOptions options, Output output, C clock = {})
    requires(!Clock<Output>)
      : StepCounterHook(std::move(options), std::move(clock), std::move(output)) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names StepCounterOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                StepCounterOptions, &StepCounterOptions::every_n_steps,
                &StepCounterOptions::every_n_secs, &StepCounterOptions::tag>>
  explicit StepCounterHook(...) = delete;  // Misspelt field? Write StepCounterOptions{...} to see which

  void begin() {
    if constexpr (requires { output_.open(options_); }) output_.open(options_);
    started_ = false;
  }

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::StepCounterHook needs a backend with `std::int64_t global_step() "
                  "const`; the backend type is named in this instantiation.");
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    // Without global_step() after_create_session has reported the mistake; say it once.
    if constexpr (HasGlobalStep<std::remove_cvref_t<decltype(run_context.session())>>) {
      const std::int64_t global_step = detail::global_step_of(run_context);
      if (global_step >= next_check_) [[unlikely]]
        check(global_step);
      if (global_step <= last_global_step_) [[unlikely]]
        not_increased(global_step);
      last_global_step_ = global_step;
    }
  }

  const StepCounterOptions& options() const noexcept { return options_; }
  Output& output() noexcept { return output_; }
  // How often every_n_secs mode sampled the clock (each sample reads it two or three times);
  // the stride keeps it far below the number of steps. Zero in every_n_steps mode.
  std::int64_t clock_reads() const noexcept { return clock_reads_; }

 private:
  static constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();
  static constexpr std::int64_t none = std::numeric_limits<std::int64_t>::min();
  static constexpr int max_warnings = 5;

  static StepCounterOptions validate(StepCounterOptions options) {
    if (options.every_n_steps && options.every_n_secs)
      throw std::invalid_argument(
          "exactly one of every_n_steps and every_n_secs should be provided.");
    if (!options.every_n_steps && !options.every_n_secs) options.every_n_steps = 100;
    if (options.every_n_steps && *options.every_n_steps < 1)
      throw std::invalid_argument("runhooks: StepCounterOptions::every_n_steps must be at least 1, got " +
                                  std::to_string(*options.every_n_steps) + ".");
    if (options.every_n_secs)
      detail::checked_secs("StepCounterOptions::every_n_secs", *options.every_n_secs, 0.0,
                           /*min_exclusive=*/true);
    return options;
  }

  [[gnu::noinline]] void check(std::int64_t global_step) {
    if constexpr (requires { output_.start(global_step); }) {
      if (!started_) {
        started_ = true;
        output_.start(global_step);
      }
    }
    if (options_.every_n_secs) ++clock_reads_;
    if (timer_.should_trigger_for_step(global_step)) {
      const TimerElapsed elapsed = timer_.update_last_triggered_step(global_step);
      if (elapsed.secs && *elapsed.secs > 0.0)
        output_.record(options_.tag, static_cast<double>(*elapsed.steps) / *elapsed.secs,
                       global_step);
    }
    next_check_ = options_.every_n_steps
                      ? detail::saturating_add(*timer_.last_triggered_step(), *options_.every_n_steps)
                      : detail::saturating_add(global_step, stride(global_step));
  }

  // Global steps until the next clock read in every_n_secs mode (detail::ClockSampler: about
  // 1/64 of a period, at least 1).
  std::int64_t stride(std::int64_t global_step) {
    return sampler_.stride(global_step, static_cast<double>(timer_.clock().now()),
                           *options_.every_n_secs);
  }

  // The global step stood still or went back. Back: re-base the measurement on the new step
  // (the first trigger after it records nothing, exactly like the first trigger of all).
  [[gnu::noinline]] void not_increased(std::int64_t global_step) {
    if (global_step == last_global_step_) return warn_not_increased(global_step);
    log(Severity::warning, "StepCounterHook: global step went back from " +
                               std::to_string(last_global_step_) + " to " +
                               std::to_string(global_step) +
                               " (a recovery restored an older state?); measuring from there.");
    timer_.reset();
    sampler_.reset();
    check(global_step);  // the first trigger from here: records nothing
  }

  void warn_not_increased(std::int64_t global_step) {
    if (warnings_ >= max_warnings) return;
    ++warnings_;
    const std::string value = std::to_string(global_step);
    log(Severity::warning,
        "It seems that global step has not been increased. Current value (could be stable): " +
            value + " vs previous value: " + value +
            ". You could increase the global step in your backend's run().");
  }

  StepCounterOptions options_;
  SecondOrStepTimer<C> timer_;
  [[no_unique_address]] Output output_;
  std::int64_t next_check_ = none;
  std::int64_t last_global_step_ = none;
  detail::ClockSampler sampler_;
  std::int64_t clock_reads_ = 0;
  int warnings_ = 0;
  bool started_ = false;  // output_.start() was called since begin()
};

// `StepCounterHook hook;`: without this guide, the catch-all constructor's guide ties with the
// first constructor's (GCC 12 crashes, Clang 14 calls it ambiguous); a non-template wins the tie.
StepCounterHook() -> StepCounterHook<>;
// StepCounterHook(options, clock[, output]) and StepCounterHook(options, output[, clock]).
// Spelled out: clang 14 does not apply a constructor's requires-clause to the guide it implies.
template <Clock C>
StepCounterHook(StepCounterOptions, C) -> StepCounterHook<C, LogOutput>;
template <Clock C, class Output>
StepCounterHook(StepCounterOptions, C, Output) -> StepCounterHook<C, Output>;
template <class Output>
  requires(!Clock<Output>)
StepCounterHook(StepCounterOptions, Output) -> StepCounterHook<SteadyClock, Output>;
template <class Output, Clock C>
  requires(!Clock<Output>)
StepCounterHook(StepCounterOptions, Output, C) -> StepCounterHook<C, Output>;

}  // namespace runhooks
