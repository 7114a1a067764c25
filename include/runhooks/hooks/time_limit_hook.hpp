// TimeLimitHook: stops training once a wall-clock budget is spent (Lightning's Timer, max_time).
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/distributed/stop_ballot.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

// Lightning's Timer(duration="DD:HH:MM:SS"): days (any number of digits), then two digits each
// of hours, minutes and seconds, blanks around allowed; hours may exceed 23 and minutes 59, as
// Lightning's timedelta takes them. Anything else is std::invalid_argument with Lightning's
// message: "`Timer(duration='1:00')` is not a valid duration. Expected a string in the format
// DD:HH:MM:SS.".
inline double parse_duration(std::string_view text) {
  const std::string original(text);
  auto bad = [&] {
    return std::invalid_argument("`Timer(duration='" + original +
                                 "')` is not a valid duration. Expected a string in the format "
                                 "DD:HH:MM:SS.");
  };
  auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  double parts[4] = {0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    std::size_t digits = 0;
    double value = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
      value = value * 10 + (text[digits] - '0');
      ++digits;
    }
    if (digits == 0 || (i > 0 && digits != 2) || digits > 12) throw bad();
    parts[i] = value;
    text.remove_prefix(digits);
    if (i < 3) {
      if (text.empty() || text.front() != ':') throw bad();
      text.remove_prefix(1);
    }
  }
  if (!text.empty()) throw bad();
  return ((parts[0] * 24 + parts[1]) * 60 + parts[2]) * 60 + parts[3];
}

struct TimeLimitOptions {
  // The budget of training time, in seconds (parse_duration("00:12:00:00") for Lightning's
  // format). Greater than 0, at most 1e9.
  double max_secs = 0.0;
  // Stop this much before the budget ends, to leave time for the final checkpoint. At least 0,
  // below max_secs.
  double save_margin_secs = 0.0;
  // The clock is read about once per this many seconds of training, not at every step: a stop comes
  // at most about this late while the step rate is steady. Greater than 0, at most 1e9.
  double resolution_secs = 1.0;

  const TimeLimitOptions& validate() const {
    detail::checked_secs("TimeLimitOptions::max_secs", max_secs, 0.0, true);
    detail::checked_secs("TimeLimitOptions::save_margin_secs", save_margin_secs, 0.0);
    if (!(save_margin_secs < max_secs))
      throw std::invalid_argument("runhooks: TimeLimitOptions::save_margin_secs must be below max_secs (" +
                                  detail::format_number(max_secs) + "), got " +
                                  detail::format_number(save_margin_secs) + ".");
    detail::checked_secs("TimeLimitOptions::resolution_secs", resolution_secs, 0.0, true);
    return *this;
  }
};

// What a resume needs (Lightning's state_dict: the elapsed training time). A small value that a
// checkpoint can hold once hooks have state there (issue 27, item 9): restore() it before the
// session is created, and the budget spans the resume.
struct TimeLimitState {
  double elapsed_secs;
};

// Stops the session once the training time, elapsed() = the restored or earlier sessions' time +
// the time since this session's backend was first created, reaches max_secs - save_margin_secs.
// Checked at creation (after_create_session): a restored budget already spent stops the session
// before its first step, as Lightning's on_fit_start check does; then after runs, on a sampled
// clock (about once per resolution_secs; the first runs read it every run while the rate is
// unknown). The stop is a clean one (every end() runs, so a CheckpointSaverHook writes its final
// checkpoint); it logs Lightning's words:
//   TimeLimitHook: Time limit reached. Elapsed time is 0:00:10. Stopping at global step 120
//   (limit 10 s, save margin 0 s).
// It takes the coordinator to stop a session before its first step: the session then polls the
// coordinator's flag on every step (tests/codegen: the "coordinator hook" row). Per silent step:
// that poll, and one compare of the global step with the next step at which it reads the clock (a
// decrement and compare of its own count on a backend without a global step). A recovery keeps
// the clock running.
// end() adds the session's time to the hook's, so a hook used for several sessions counts them
// all, as Lightning's offset does.
// Many processes: the chief's clock decides. Wrap the hook so that only the chief runs it and its
// stops are voted, with the vote last on every rank:
//   MpiChiefOnly(MpiVoted(TimeLimitHook({.max_secs = 3600})))   (ChiefOnly(Voted(...), c))
//   ...                                                          MpiStopVoteHook(...)
// Every rank stops after the same vote step once the chief's clock says so; no other rank reads
// its clock. Voted calls voted(): a budget spent at creation then casts the chief's vote instead
// of stopping it alone before its first step, and every rank stops after the first vote step.
// The chief's checkpoint carries the elapsed time (the wrappers are StatefulHooks too).
template <Clock C = SteadyClock>
class TimeLimitHook {
 public:
  explicit TimeLimitHook(TimeLimitOptions options, C clock = {})
      : options_(options.validate()), clock_(std::move(clock)) {}
  template <class Hint = detail::write_the_options_type<
                TimeLimitOptions, &TimeLimitOptions::max_secs, &TimeLimitOptions::save_margin_secs,
                &TimeLimitOptions::resolution_secs>>
  explicit TimeLimitHook(...) = delete;  // Misspelt field? Write TimeLimitOptions{...} to see which

  void begin() noexcept {
    started_ = false;
    stopped_ = false;
    runs_to_sample_ = 1;
    next_sample_step_ = min_step;
    stride_ = 1;
    runs_ = 0;
    clock_reads_ = 0;
    sampler_.reset();
  }

  template <class Backend>
  void after_create_session(Backend&, Coordinator& coord) {
    next_sample_step_ = min_step;  // a recovery may have moved the global step back
    if (!started_) {
      started_ = true;
      start_ = clock_.now();
    }
    if (spent(elapsed())) {
      stopped_ = true;
      if (voted_) {
        log(Severity::info, message(elapsed(), "every rank after the first vote"));
        cast_stop_vote();
      } else {
        log(Severity::info, message(elapsed(), "before the first step"));
        coord.request_stop();
      }
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    // With a global step, one compare with the step of the next clock read (the session reads the
    // step once per run for every hook); without one, a count of the hook's own runs.
    if constexpr (requires { run_context.global_step(); }) {
      const std::int64_t step = run_context.global_step();
      if (step >= next_sample_step_) [[unlikely]]
        if (sample(step, step)) run_context.request_stop();
    } else {
      if (--runs_to_sample_ <= 0) [[unlikely]]
        if (sample(runs_ + stride_, -1)) run_context.request_stop();
    }
  }

  template <class Backend>
  void end(Backend&) noexcept {
    offset_ = elapsed();
    started_ = false;
  }

  const TimeLimitOptions& options() const noexcept { return options_; }
  // Lightning's time_elapsed() and time_remaining() (of the budget, not counting the margin).
  double elapsed() const { return offset_ + (started_ ? clock_.now() - start_ : 0.0); }
  double remaining() const { return options_.max_secs - elapsed(); }
  // Whether the hook asked to stop since begin().
  bool stopped() const noexcept { return stopped_; }
  // How often the clock was read on the per-step path since begin().
  std::int64_t clock_reads() const noexcept { return clock_reads_; }

  // A checkpoint carries the state under state_name() (StatefulHook, hook_state.hpp).
  static std::string state_name() { return "TimeLimitHook"; }
  TimeLimitState state() const { return {elapsed()}; }
  // The elapsed time of an earlier run; call it before the session is created (or between
  // begin() and after_create_session()).
  void restore(const TimeLimitState& state) {
    if (!(state.elapsed_secs >= 0.0 && state.elapsed_secs <= detail::max_duration_secs))
      throw std::invalid_argument("runhooks: TimeLimitHook::restore: the saved elapsed time must be "
                                  "a number of seconds at least 0, got " +
                                  detail::format_number(state.elapsed_secs) + ".");
    offset_ = state.elapsed_secs;
    if (started_) start_ = clock_.now();
  }

  C& clock() noexcept { return clock_; }

  // Called by Voted (MpiVoted) when it wraps the hook: a budget spent at creation casts this
  // rank's stop vote (cast_stop_vote()) rather than stopping this rank alone.
  void voted() noexcept { voted_ = true; }

 private:
  bool spent(double secs) const noexcept {
    return secs >= options_.max_secs - options_.save_margin_secs;
  }

  // count: the global step, or the hook's runs since begin(); step: the global step or -1.
  [[gnu::noinline]] bool sample(std::int64_t count, std::int64_t step) {
    ++clock_reads_;
    runs_ = count;
    const double now = clock_.now();
    const double secs = offset_ + (now - start_);
    if (spent(secs)) {
      stopped_ = true;
      log(Severity::info, message(secs, step >= 0 ? "at global step " + std::to_string(step)
                                                  : std::string("after this run")));
      runs_to_sample_ = 1;
      next_sample_step_ = min_step;
      return true;
    }
    // The sampler's stride aims at 64 reads per period: a period of 64 resolutions gives one
    // read per resolution_secs.
    stride_ = sampler_.stride(count, now, 64.0 * options_.resolution_secs);
    runs_to_sample_ = stride_;
    next_sample_step_ = detail::saturating_add(count, stride_);
    return false;
  }

  // Lightning's str(timedelta(seconds=int(secs))): "0:00:10", "1 day, 2:03:04".
  static std::string clock_text(double secs) {
    const auto whole = static_cast<std::int64_t>(secs);
    const std::int64_t days = whole / 86400, rest = whole % 86400;
    char text[64];
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", static_cast<long long>(rest / 3600),
                  static_cast<long long>(rest / 60 % 60), static_cast<long long>(rest % 60));
    if (days == 0) return text;
    return std::to_string(days) + (days == 1 ? " day, " : " days, ") + text;
  }

  std::string message(double secs, const std::string& when) const {
    return "TimeLimitHook: Time limit reached. Elapsed time is " + clock_text(secs) +
           ". Stopping " + when + " (limit " + detail::format_number(options_.max_secs) +
           " s, save margin " + detail::format_number(options_.save_margin_secs) + " s).";
  }

  TimeLimitOptions options_;
  C clock_;
  static constexpr std::int64_t min_step = std::numeric_limits<std::int64_t>::min();
  std::int64_t runs_to_sample_ = 1;
  std::int64_t next_sample_step_ = min_step;
  double start_ = 0.0;
  double offset_ = 0.0;
  bool started_ = false;
  bool stopped_ = false;
  bool voted_ = false;
  detail::ClockSampler sampler_;
  std::int64_t stride_ = 1;  // runs between the last sample and the next
  std::int64_t runs_ = 0;    // the count at the last sample
  std::int64_t clock_reads_ = 0;
};

TimeLimitHook(TimeLimitOptions) -> TimeLimitHook<>;

}  // namespace runhooks
