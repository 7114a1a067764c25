// ProgressBarHook: a progress bar on a terminal (steps, rate, ETA, the last values of chosen
// keys) that log lines print above, or periodic plain lines when the output is not a terminal.
#pragma once

#include <runhooks/detail/config.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/format_value.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

struct ProgressBarOptions {
  // The global step at which training ends, for the percentage and the ETA. Unset: the last
  // step of a StopAtStepHook of the same session, once linked (see ProgressBarHook), else none.
  std::optional<std::int64_t> total{};
  // On a terminal: redraw at most this often. Greater than 0, at most 1000.
  double redraws_per_sec = 10.0;
  // Not on a terminal (a CI log): one plain line this often. Greater than 0, at most 1e9.
  double plain_line_secs = 30.0;
  // Characters of the bar. 1 to 200.
  int width = 30;
  // Force the terminal (true) or plain (false) display; unset: whether the stream is a TTY.
  std::optional<bool> terminal{};

  // std::invalid_argument naming the option and value; a compile error when constexpr.
  constexpr const ProgressBarOptions& validate() const {
    if (total && *total < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: ProgressBarOptions::total must be at least 0";
      throw std::invalid_argument("runhooks: ProgressBarOptions::total must be at least 0, got " +
                                  std::to_string(*total) + ".");
    }
    if (!(redraws_per_sec > 0.0 && redraws_per_sec <= 1000.0)) {
      if (std::is_constant_evaluated()) throw "runhooks: ProgressBarOptions::redraws_per_sec must be greater than 0 and at most 1000";
      throw std::invalid_argument(
          "runhooks: ProgressBarOptions::redraws_per_sec must be greater than 0 and at most "
          "1000, got " + detail::format_number(redraws_per_sec) + ".");
    }
    detail::checked_secs("ProgressBarOptions::plain_line_secs", plain_line_secs, 0.0,
                         /*min_exclusive=*/true);
    if (width < 1 || width > 200) {
      if (std::is_constant_evaluated()) throw "runhooks: ProgressBarOptions::width must be 1 to 200";
      throw std::invalid_argument("runhooks: ProgressBarOptions::width must be 1 to 200, got " +
                                  std::to_string(width) + ".");
    }
    return *this;
  }
};

namespace detail {
// A value in a progress bar: 4 significant digits for floating point, as Keras' progbar shows.
template <class T>
std::string compact_value(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", static_cast<double>(value));
    return text;
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(value);
  } else {
    return std::string(std::string_view(value));
  }
}

// tqdm's format_sizeof (tqdm 4.70, unit_scale): three significant digits and an SI prefix,
// 9 -> "9.00", 99.9 -> "99.9", 999 -> "999", 1234 -> "1.23k", 16400 -> "16.4k", 1.2e6 -> "1.20M",
// then G, T, P, E, Z, and "1.0Y" with one decimal past them. printf rounds as Python does.
inline std::string format_sizeof(double num) {
  static constexpr const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E", "Z"};
  char text[400];  // "%.1f" of the largest double over 1e24
  for (const char* prefix : prefixes) {
    const double magnitude = std::fabs(num);
    if (magnitude < 999.5) {
      const int decimals = magnitude < 9.995 ? 2 : magnitude < 99.95 ? 1 : 0;
      std::snprintf(text, sizeof text, "%.*f%s", decimals, num, prefix);
      return text;
    }
    num /= 1000.0;
  }
  std::snprintf(text, sizeof text, "%.1fY", num);
  return text;
}

// A rate of steps per second as tqdm shows it, with a space before the unit: "16.4k it/s", and
// below one step a second the seconds per step, "2.50 s/it". 0 is "0.00 it/s" (tqdm: "?it/s").
inline std::string format_rate(double steps_per_sec) {
  if (steps_per_sec > 0.0 && 1.0 / steps_per_sec > 1.0)
    return format_sizeof(1.0 / steps_per_sec) + " s/it";
  return format_sizeof(steps_per_sec) + " it/s";
}

// A duration in tqdm's layout, "1:02:03", or "02:03" under an hour, rounded to the second (tqdm
// truncates); "?" when negative, not a number or past 100000 hours.
inline std::string format_duration(double secs) {
  if (!(secs >= 0.0) || secs > 3.6e8) return "?";
  const auto total = static_cast<long long>(secs + 0.5);
  char text[32];
  if (total >= 3600)
    std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", total / 3600, total / 60 % 60, total % 60);
  else
    std::snprintf(text, sizeof text, "%02lld:%02lld", total / 60, total % 60);
  return text;
}

inline bool is_terminal(std::FILE* stream) noexcept {
#if __has_include(<unistd.h>)
  return stream != nullptr && ::isatty(::fileno(stream)) == 1;
#else
  (void)stream;
  return false;
#endif
}

// The bar's line on a terminal, redrawn in place. While it is open it is the live line of
// log.hpp: a log line erases it and it is drawn again below, as tqdm.write does. Every write to
// the terminal holds the live-line lock, so a log line from another thread never lands inside a
// draw. When a session's loop ends, `Finisher` (the bar that drew last) may end the line. A copy
// starts with no open line; a move carries the open line and its registration, not the
// finisher (it names the display that moved), until the next draw.
// Who ends a TerminalLine when its session's loop ends (outside the class: a nested type's
// member initializers are not usable in the class's own default arguments).
struct LineFinisher {
  void* display = nullptr;
  void (*finish)(void* display, const void* backend) = nullptr;
};

class TerminalLine {
 public:
  using Finisher = LineFinisher;

  TerminalLine() = default;
  TerminalLine(const TerminalLine&) noexcept {}
  TerminalLine(TerminalLine&& other) noexcept { take(other); }
  TerminalLine& operator=(const TerminalLine& other) noexcept {
    if (this != &other) end();
    return *this;
  }
  TerminalLine& operator=(TerminalLine&& other) noexcept {
    if (this != &other) {
      end();
      take(other);
    }
    return *this;
  }
  ~TerminalLine() { end(); }

  // Writes `text` over the line; `final` ends the line with '\n' and closes it.
  void draw(std::FILE* stream, std::string text, bool final, Finisher finisher = {}) {
    LiveLineLock lock;
    std::fprintf(stream, "\r%s\x1b[K%s", text.c_str(), final ? "\n" : "");
    std::fflush(stream);
    if (final) {
      stream_ = nullptr;
      finisher_ = {};
      lock.hide(this);
    } else {
      stream_ = stream;
      text_ = std::move(text);
      finisher_ = finisher;
      lock.show({stream, &redraw, this, &loop_ends});
    }
  }
  // Ends an open line with '\n' (a bar destroyed before its end()).
  void end() noexcept {
    if (stream_ == nullptr) return;  // only this thread writes stream_
    LiveLineLock lock;
    std::fputc('\n', stream_);
    std::fflush(stream_);
    stream_ = nullptr;
    lock.hide(this);
  }

 private:
  void take(TerminalLine& other) noexcept {
    if (other.stream_ == nullptr) return;
    LiveLineLock lock;
    stream_ = std::exchange(other.stream_, nullptr);
    text_ = std::move(other.text_);
    other.finisher_ = {};
    lock.move(&other, this);
  }
  // log()'s redraw after its line, under the lock.
  static void redraw(const void* self) {
    const auto& line = *static_cast<const TerminalLine*>(self);
    std::fprintf(line.stream_, "\r%s\x1b[K", line.text_.c_str());
    std::fflush(line.stream_);
  }

  // log.hpp's live_line_loop_ends, without the lock: the finisher draws (and takes it).
  static void loop_ends(const void* self, const void* backend) {
    const Finisher finisher = static_cast<const TerminalLine*>(self)->finisher_;
    if (finisher.finish != nullptr) finisher.finish(finisher.display, backend);
  }

  std::FILE* stream_ = nullptr;  // where the line is open; nullptr: closed
  std::string text_;             // what it shows
  Finisher finisher_{};          // who ends it when its session's loop ends
};
}  // namespace detail

template <class KeyList = Keys<>, Clock C = SteadyClock>
class ProgressBarHook;

// A progress bar, after tqdm and Keras' progbar. On a terminal it redraws one line in place, at
// most redraws_per_sec times per second:
//   450/1000 [=============>................]  45%  36.4 it/s  ETA 00:15  loss=0.231
//   12000 steps  16.4k it/s  00:01
//   3/10 [=========>....................]  30%  2.50 s/it  ETA 00:18
// and when the output is not a terminal (a CI log) it writes a plain line every plain_line_secs:
//   progress: step 450/1000 (45%), 36.4 it/s, elapsed 00:12, ETA 00:15, loss=0.231
// The count is the global step (local runs for a backend without one), an exact integer as tqdm
// shows n/total; the rate is the steps since the first draw over the time since then, in tqdm's
// format_sizeof (3 significant digits, k, M, G, T), and in seconds per step below one step a
// second. The keys' values are those of the last redraw. Without a total it shows the step, the
// rate and the elapsed time. end() reads the keys from the backend once more, draws the final
// state (no ETA) and ends the line.
//
// On a terminal, every line of runhooks::log (the default sink's or the program's own) prints
// above the bar, as tqdm.write does: the bar's line is erased, the sink called, and the bar drawn
// again below, from any thread (log.hpp, the live line). In plain mode nothing changes: no escape
// codes. The terminal is detected as isatty() of the stream, or forced by `terminal`.
//
// The total is ProgressBarOptions::total, or the last step of a StopAtStepHook of the same
// session: runhooks::link_hooks(session) after constructing the session (or
// make_training_session, which does it) finds one at compile time and the bar reads its
// last_step() when it draws.
//
// When the session's loop ends (a hook or the caller asks it to stop), the bar draws its final
// state at once, as end() would, and ends its line, so that what the program prints after
// `while (!session.should_stop()) session.run();` starts on a line of its own; end() then draws
// nothing more unless steps ran since. (A stop from another thread, through the coordinator,
// leaves the final draw to end().)
//
// The keys are fetched only on the runs that redraw. Per silent step: one compare of the step
// with the next one at which the clock is sampled (detail::PeriodicTrigger), so the per-step cost
// is a timer check however fast the steps are; the clock itself is read about 64 times per
// redraw period.
template <KeyType... Ks, Clock C>
class ProgressBarHook<Keys<Ks...>, C> {
  static_assert((detail::formattable_value<typename Ks::value_type> && ...),
                "runhooks::ProgressBarHook shows numbers, bools and strings: each key's "
                "value_type must be one of those.");

 public:
  explicit ProgressBarHook(ProgressBarOptions options = {}, std::FILE* stream = stderr,
                           C clock = {})
      : options_(options.validate()), stream_(stream),
        trigger_(std::nullopt, 1.0 / options_.redraws_per_sec, std::move(clock)) {}
  explicit ProgressBarHook(Keys<Ks...>, ProgressBarOptions options = {},
                           std::FILE* stream = stderr, C clock = {})
      : ProgressBarHook(options, stream, std::move(clock)) {}
  ProgressBarHook(ProgressBarOptions options, C clock)
      : ProgressBarHook(options, stderr, std::move(clock)) {}
  ProgressBarHook(Keys<Ks...>, ProgressBarOptions options, C clock)
      : ProgressBarHook(options, stderr, std::move(clock)) {}

  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names ProgressBarOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                ProgressBarOptions, &ProgressBarOptions::total, &ProgressBarOptions::redraws_per_sec,
                &ProgressBarOptions::plain_line_secs, &ProgressBarOptions::width,
                &ProgressBarOptions::terminal>>
  explicit ProgressBarHook(...) = delete;  // Misspelt field? Write ProgressBarOptions{...} to see which

  // A copy has no open line; a move (even of a bar that is drawn) carries it, and the
  // destructor ends a line that end() did not.
  ProgressBarHook(const ProgressBarHook&) = default;
  ProgressBarHook(ProgressBarHook&&) noexcept = default;
  ProgressBarHook& operator=(const ProgressBarHook&) = default;
  ProgressBarHook& operator=(ProgressBarHook&&) noexcept = default;

  // Links the bar to a StopAtStepHook among `hooks`, found by type (runhooks::link_hooks calls
  // this with every hook of the session). Its last_step() becomes the total unless one was set.
  template <class... Hooks>
  void link(const Hooks&... hooks) noexcept {
    ([&] {
      if constexpr (std::is_same_v<Hooks, StopAtStepHook>)
        if (stop_ == nullptr) stop_ = &hooks;
    }(), ...);
  }

  void begin() {
    terminal_ = options_.terminal ? *options_.terminal : detail::is_terminal(stream_);
    trigger_ = detail::PeriodicTrigger<C>(
        std::nullopt, terminal_ ? 1.0 / options_.redraws_per_sec : options_.plain_line_secs,
        std::move(trigger_.clock()));
    runs_ = 0;
    first_.reset();
    values_.clear();
    ended_at_.reset();
  }

  template <class Backend>
  void after_create_session(Backend& backend) {
    static_assert(detail::check_hook_keys<ProgressBarHook, Backend, Ks...>());
    // For the end of the loop (see loop_ends): which session is ours, and its final draw.
    backend_ = &backend;
    final_draw_on_ = [](ProgressBarHook& bar, void* session) {
      return bar.final_draw(*static_cast<Backend*>(session));
    };
  }

  template <class Ctx>
  auto before_run(Ctx& run_context) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    std::int64_t count = runs_;
    if constexpr (HasGlobalStep<Backend>) count = run_context.global_step();
    if (trigger_.due(count)) [[unlikely]]
      draw_ = true;
    if constexpr (sizeof...(Ks) > 0 && detail::fetches_all<Backend, Ks...>)
      return SessionRunArgs{runhooks::fetch<Ks>(draw_)...};
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (!HasGlobalStep<Backend>) ++runs_;  // the count of a backend without a step
    if (draw_) [[unlikely]] {
      draw_ = false;
      std::int64_t count = runs_;
      if constexpr (HasGlobalStep<Backend>) count = run_context.global_step();
      // A key that a hook declared before this one produces (an EvaluationHook) comes only on
      // its evaluation steps: without all of them the bar shows the values it kept.
      if constexpr (sizeof...(Ks) > 0 && detail::fetches_all<Backend, Ks...>)
        if ((run_values[Ks{}].has_value() && ...)) keep_values(values_type(*run_values[Ks{}]...));
      redraw(count, false);
    }
  }

  // The final state: the keys read from the backend once more (no step), and the line ended;
  // nothing when it was drawn as the loop ended and no step ran since.
  template <class Backend>
  void end(Backend& session) {
    if (ended_at_ && *ended_at_ == count_of(session)) return;
    final_draw(session);
  }

  const ProgressBarOptions& options() const noexcept { return options_; }
  // The total the bar shows, if it knows one.
  std::optional<std::int64_t> total() const noexcept {
    if (options_.total) return options_.total;
    if (stop_ != nullptr) return stop_->last_step();
    return std::nullopt;
  }
  // Redraws (terminal) or lines (plain) so far, the final one included.
  std::int64_t draws() const noexcept { return draws_; }
  C& clock() noexcept { return trigger_.clock(); }

 private:
  using values_type = KeyValues<Ks...>;

  template <class Backend>
  std::int64_t count_of(Backend& session) const {
    if constexpr (HasGlobalStep<Backend>)
      return static_cast<std::int64_t>(session.global_step());
    else
      return runs_;
  }

  template <class Backend>
  std::int64_t final_draw(Backend& session) {
    const std::int64_t count = count_of(session);
    if constexpr (sizeof...(Ks) > 0 && detail::fetches_all<Backend, Ks...>)
      keep_values(values_type::from_backend(session));
    redraw(count, true);
    return count;
  }

  // The session whose backend is `backend` ends its loop (TerminalLine's finisher): the final
  // draw now, if that session is ours.
  static void loop_ends(void* display, const void* backend) {
    ProgressBarHook& bar = *static_cast<ProgressBarHook*>(display);
    if (backend == nullptr || backend != bar.backend_ || bar.final_draw_on_ == nullptr) return;
    bar.ended_at_ = bar.final_draw_on_(bar, const_cast<void*>(backend));
  }

  [[gnu::noinline]] void keep_values(const values_type& fetched) {
    values_.clear();
    (append_value(key_name<Ks>(), fetched[Ks{}]), ...);
  }
  template <class T>
  void append_value(std::string_view name, const T& value) {
    if (!values_.empty()) values_ += terminal_ ? "  " : ", ";
    values_.append(name);
    values_ += '=';
    values_ += detail::compact_value(value);
  }

  [[gnu::noinline]] void redraw(std::int64_t count, bool final) {
    const double now = trigger_.clock().now();
    if (!final) trigger_.fire(count);
    if (!first_) first_ = First{count, now};
    const double elapsed = now - first_->time;
    const double steps = static_cast<double>(count - first_->count);
    // A plain double and a flag: GCC's -Wmaybe-uninitialized misreads an optional<double> here.
    const double rate = elapsed > 0.0 && steps >= 0.0 ? steps / elapsed : -1.0;  // -1: unknown
    const std::optional<std::int64_t> goal = total();
    std::string line = terminal_ ? terminal_line(count, goal, rate, elapsed, final)
                                 : plain_line(count, goal, rate, elapsed, final);
    if (!values_.empty()) {
      line += terminal_ ? "  " : ", ";
      line += values_;
    }
    if (stream_ == nullptr) return;
    if (terminal_) {
      // Back to the line's start, the new text, then erase what a longer line left behind.
      if (!final) ended_at_.reset();  // a line open again: the next end of the loop ends it
      line_.draw(stream_, std::move(line), final, {this, &loop_ends});
    } else {
      std::fprintf(stream_, "%s\n", line.c_str());
      std::fflush(stream_);
    }
    ++draws_;
  }

  std::string terminal_line(std::int64_t count, std::optional<std::int64_t> goal,
                            double rate, double elapsed, bool final) const {
    std::string line;
    char text[96];
    if (goal && *goal > 0) {
      const double fraction = std::fmin(1.0, std::fmax(0.0, static_cast<double>(count) /
                                                               static_cast<double>(*goal)));
      std::snprintf(text, sizeof text, "%lld/%lld [", static_cast<long long>(count),
                    static_cast<long long>(*goal));
      line += text;
      const int filled = static_cast<int>(fraction * options_.width);
      for (int i = 0; i < options_.width; ++i)
        line += i < filled ? '=' : (i == filled && fraction < 1.0 ? '>' : '.');
      std::snprintf(text, sizeof text, "] %3d%%", static_cast<int>(fraction * 100.0));
      line += text;
    } else {
      std::snprintf(text, sizeof text, "%lld steps", static_cast<long long>(count));
      line += text;
    }
    if (rate >= 0.0) line += "  " + detail::format_rate(rate);
    if (!final && goal && rate > 0.0 && count < *goal)
      line += "  ETA " + detail::format_duration(static_cast<double>(*goal - count) / rate);
    else
      line += "  " + detail::format_duration(elapsed);
    return line;
  }

  std::string plain_line(std::int64_t count, std::optional<std::int64_t> goal,
                         double rate, double elapsed, bool final) const {
    char text[96];
    std::string line = "progress: step " + std::to_string(count);
    if (goal && *goal > 0) {
      std::snprintf(text, sizeof text, "/%lld (%d%%)", static_cast<long long>(*goal),
                    static_cast<int>(std::fmin(1.0, static_cast<double>(count) /
                                                        static_cast<double>(*goal)) * 100.0));
      line += text;
    }
    if (rate >= 0.0) line += ", " + detail::format_rate(rate);
    line += ", elapsed " + detail::format_duration(elapsed);
    if (!final && goal && rate > 0.0 && count < *goal)
      line += ", ETA " + detail::format_duration(static_cast<double>(*goal - count) / rate);
    return line;
  }

  struct First {
    std::int64_t count;
    double time;
  };

  ProgressBarOptions options_;
  std::FILE* stream_;
  detail::PeriodicTrigger<C> trigger_;
  const StopAtStepHook* stop_ = nullptr;
  bool terminal_ = false;
  bool draw_ = false;
  std::int64_t runs_ = 0;
  std::int64_t draws_ = 0;
  std::optional<First> first_{};
  std::string values_;
  // The session's backend (after_create_session) and the final draw on it, for the end of its
  // loop; the count drawn then, which end() does not draw again.
  const void* backend_ = nullptr;
  std::int64_t (*final_draw_on_)(ProgressBarHook&, void*) = nullptr;
  std::optional<std::int64_t> ended_at_{};
  detail::TerminalLine line_;
};

ProgressBarHook() -> ProgressBarHook<Keys<>>;
// Arguments that fit no guide here (braced options with a misspelt field, most often) deduce
// ProgressBarHook<Keys<>>, whose catch-all constructor names the options and their fields. A
// template, so that the guide above keeps ProgressBarHook(); not one per key list: with the keys
// as its first parameter it would tie with ProgressBarHook(Keys<Ks...>) for a one-argument call.
template <class Hint = void>
ProgressBarHook(...) -> ProgressBarHook<Keys<>>;
ProgressBarHook(ProgressBarOptions) -> ProgressBarHook<Keys<>>;
ProgressBarHook(ProgressBarOptions, std::FILE*) -> ProgressBarHook<Keys<>>;
template <Clock C>
ProgressBarHook(ProgressBarOptions, std::FILE*, C) -> ProgressBarHook<Keys<>, C>;
template <Clock C>
ProgressBarHook(ProgressBarOptions, C) -> ProgressBarHook<Keys<>, C>;
template <KeyType... Ks>
ProgressBarHook(Keys<Ks...>) -> ProgressBarHook<Keys<Ks...>>;
template <KeyType... Ks>
ProgressBarHook(Keys<Ks...>, ProgressBarOptions) -> ProgressBarHook<Keys<Ks...>>;
template <KeyType... Ks>
ProgressBarHook(Keys<Ks...>, ProgressBarOptions, std::FILE*) -> ProgressBarHook<Keys<Ks...>>;
template <KeyType... Ks, Clock C>
ProgressBarHook(Keys<Ks...>, ProgressBarOptions, std::FILE*, C) -> ProgressBarHook<Keys<Ks...>, C>;
template <KeyType... Ks, Clock C>
ProgressBarHook(Keys<Ks...>, ProgressBarOptions, C) -> ProgressBarHook<Keys<Ks...>, C>;

}  // namespace runhooks
