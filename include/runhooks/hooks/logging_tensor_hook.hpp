// LoggingTensorHook: logs fetched values every N local iterations, every N seconds, or at the end.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/format_value.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

struct LoggingTensorOptions {
  std::optional<std::int64_t> every_n_iter{};  // local iterations: runs of this session
  std::optional<double> every_n_secs{};
  bool at_end = false;  // also log once in end(), reading the keys from the backend

  // TensorFlow's rules and messages: at_end and/or exactly one of every_n_iter and
  // every_n_secs; every_n_iter at least 1. Beyond TensorFlow, every_n_secs must be greater than
  // 0 and at most 1e9. std::invalid_argument, or a compile error when the options are constexpr.
  constexpr const LoggingTensorOptions& validate() const {
    const bool only_at_end = at_end && !every_n_iter && !every_n_secs;
    if (!only_at_end && every_n_iter.has_value() == every_n_secs.has_value()) {
      if (std::is_constant_evaluated()) throw "either at_end and/or exactly one of every_n_iter and every_n_secs must be provided.";
      throw std::invalid_argument(
          "either at_end and/or exactly one of every_n_iter and every_n_secs must be provided.");
    }
    if (every_n_iter && *every_n_iter <= 0) {
      if (std::is_constant_evaluated()) throw "invalid every_n_iter: LoggingTensorOptions::every_n_iter must be at least 1";
      throw std::invalid_argument("invalid every_n_iter=" + std::to_string(*every_n_iter) + ".");
    }
    if (every_n_secs)
      detail::checked_secs("LoggingTensorOptions::every_n_secs", *every_n_secs, 0.0,
                           /*min_exclusive=*/true);
    return *this;
  }
};

namespace detail {
// A formatter: `std::string f(const KeyValues<Ks...>&)` (any result a std::string is made of).
template <class Formatter, class Values>
concept formats_values = requires(const Formatter& f, const Values& values) {
  std::string(f(values));
};
}  // namespace detail

// TensorFlow's line: "loss = 0.25, step = 42", in the order the keys were given.
struct DefaultTensorFormatter {
  template <class... Ks>
  std::string operator()(const KeyValues<Ks...>& values) const {
    std::string line;
    values.for_each([&](std::string_view name, const auto& value) {
      if (!line.empty()) line += ", ";
      line.append(name);
      line += " = ";
      line += detail::format_value(value);
    });
    return line;
  }
};

// A value as LoggingTensorHook prints it (numpy's str(): 42.0f is "42.0", a std::vector<double>
// {1, 2.5, 3} is "[1.  2.5 3. ]"), for formatters that want TensorFlow's look.
template <detail::loggable_value T>
std::string format_value(const T& value) {
  return detail::format_value(value);
}

template <class KeyList, class Formatter = DefaultTensorFormatter, Clock C = SteadyClock>
class LoggingTensorHook;

// TensorFlow's LoggingTensorHook. Logs the keys' values (runhooks::log, info) on the local
// iterations where TensorFlow's SecondOrStepTimer triggers: the first run of the session
// (iteration 0), then every_n_iter iterations or every_n_secs seconds after the last log; and,
// with at_end, once more in end(), where the keys are read from the backend itself.
// Iterations count this hook's completed runs from begin().
//
// The line is TensorFlow's, "tag = value, tag2 = value2", followed by " (0.125 sec)", the time
// since the previous log, from the second log on; each tag is runhooks::key_name<K>() and each
// value is printed as numpy's str() prints it (LoggingTensorHook prints tensors with numpy): a
// scalar ("0.25"), or a 1-D array of numbers ("[1.  2.5 3. ]", wrapped at 75 columns, the middle
// of more than 1000 elements shown as "..."; detail/format_value.hpp). A
// formatter, any callable taking `const runhooks::KeyValues<Ks...>&` and returning a string,
// replaces the whole line.
//
// The keys are fetched only on the runs that log: before_run returns runhooks::fetch<K>(false)
// on the others, and the backend is not asked. Per silent step: one compare of the iteration
// count with the next one that could log, and one increment. With every_n_secs the clock is
// sampled, not read on every step (detail::PeriodicTrigger): a log is at most about 1/64 of a
// period late while the step rate is steady.
//
// Differs from TensorFlow: the keys are a list, logged in the order given (TensorFlow sorts a
// dict's tags); every_n_secs must be greater than 0; lines go through runhooks::log.
template <KeyType... Ks, class Formatter, Clock C>
class LoggingTensorHook<Keys<Ks...>, Formatter, C> {
  static_assert(sizeof...(Ks) > 0,
                "runhooks::LoggingTensorHook needs at least one key to log: "
                "LoggingTensorHook{runhooks::keys<Loss>, {.every_n_iter = 100}}");
  static_assert(detail::formats_values<Formatter, KeyValues<Ks...>>,
                "runhooks::LoggingTensorHook: the formatter must be callable as "
                "`std::string formatter(const runhooks::KeyValues<Keys...>& values)`; the "
                "formatter type is named in this instantiation.");
  static_assert(!std::is_same_v<Formatter, DefaultTensorFormatter> ||
                    (detail::loggable_value<typename Ks::value_type> && ...),
                "runhooks::LoggingTensorHook prints numbers, bools, strings and 1-D arrays of "
                "numbers (std::vector, std::array, std::span); give it a formatter for other "
                "value types.");

 public:
  using values_type = KeyValues<Ks...>;

  LoggingTensorHook(Keys<Ks...>, LoggingTensorOptions options, Formatter formatter = {},
                    C clock = {})
      : options_(options.validate()), formatter_(std::move(formatter)),
        trigger_(make_trigger(options_, std::move(clock))) {}
  LoggingTensorHook(Keys<Ks...> keys, LoggingTensorOptions options, C clock)
    requires std::same_as<Formatter, DefaultTensorFormatter>
      : LoggingTensorHook(keys, options, Formatter{}, std::move(clock)) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names LoggingTensorOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                LoggingTensorOptions, &LoggingTensorOptions::every_n_iter,
                &LoggingTensorOptions::every_n_secs, &LoggingTensorOptions::at_end>>
  explicit LoggingTensorHook(...) = delete;  // Misspelt field? Write LoggingTensorOptions{...} to see which

  // TensorFlow's begin(): the timer is reset and iterations count from 0 again.
  void begin() { trigger_.reset(); }

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(detail::check_hook_keys<LoggingTensorHook, Backend, Ks...>());
  }

  template <class Ctx>
  auto before_run(Ctx& run_context) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    // A key the backend lacks was reported by after_create_session; request nothing then.
    if constexpr (detail::fetches_all<Backend, Ks...>) {
      const bool fire = trigger_.due();
      return SessionRunArgs{runhooks::fetch<Ks>(fire)...};
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    // The keys were fetched on exactly the runs that log (none when the backend lacks one,
    // which after_create_session reported). A key that a hook declared before this one produces
    // (an EvaluationHook) comes only on that hook's evaluation steps: a run without all of them
    // logs nothing, and the log stays due until they all come.
    if constexpr (detail::fetches_all<Backend, Ks...>) {
      if ((run_values[Ks{}].has_value() && ...)) [[unlikely]]
        log_values(values_type::from_run_values(run_values));
    }
    trigger_.count();
  }

  template <class Backend>
  void end(Backend& session) {
    if constexpr (detail::fetches_all<Backend, Ks...>)
      if (options_.at_end) log_values(values_type::from_backend(session));
  }

  const LoggingTensorOptions& options() const noexcept { return options_; }
  // Completed runs since begin().
  std::int64_t iterations() const noexcept { return trigger_.iterations(); }
  // How often every_n_secs mode sampled the clock (see detail::PeriodicTrigger); 0 otherwise.
  std::int64_t clock_samples() const noexcept { return trigger_.periodic().clock_samples(); }
  C& clock() noexcept { return trigger_.periodic().clock(); }

 private:

  static detail::IterationTrigger<C> make_trigger(const LoggingTensorOptions& options, C clock) {
    if (!options.every_n_iter && !options.every_n_secs)
      return detail::IterationTrigger<C>(detail::PeriodicTrigger<C>::never(std::move(clock)));
    return detail::IterationTrigger<C>(
        detail::PeriodicTrigger<C>(options.every_n_iter, options.every_n_secs, std::move(clock)));
  }

  [[gnu::noinline]] void log_values(const values_type& values) {
    const TimerElapsed elapsed = trigger_.fire();
    std::string line = formatter_(values);
    if constexpr (std::is_same_v<Formatter, DefaultTensorFormatter>) {
      if (elapsed.secs) {
        char secs[48];
        std::snprintf(secs, sizeof secs, " (%.3f sec)", *elapsed.secs);
        line += secs;
      }
    }
    log(Severity::info, line);
  }

  LoggingTensorOptions options_;
  [[no_unique_address]] Formatter formatter_;
  detail::IterationTrigger<C> trigger_;
};

template <KeyType... Ks>
LoggingTensorHook(Keys<Ks...>, LoggingTensorOptions) -> LoggingTensorHook<Keys<Ks...>>;
// Arguments that fit no guide above (a misspelt option, most often) reach the catch-all
// constructor: a partial specialization's constructors imply no guide.
template <KeyType... Ks>
LoggingTensorHook(Keys<Ks...>, ...) -> LoggingTensorHook<Keys<Ks...>>;
template <KeyType... Ks, class Formatter>
  requires(!Clock<Formatter>)
LoggingTensorHook(Keys<Ks...>, LoggingTensorOptions, Formatter)
    -> LoggingTensorHook<Keys<Ks...>, Formatter>;
template <KeyType... Ks, Clock C>
LoggingTensorHook(Keys<Ks...>, LoggingTensorOptions, C)
    -> LoggingTensorHook<Keys<Ks...>, DefaultTensorFormatter, C>;
template <KeyType... Ks, class Formatter, Clock C>
LoggingTensorHook(Keys<Ks...>, LoggingTensorOptions, Formatter, C)
    -> LoggingTensorHook<Keys<Ks...>, Formatter, C>;

}  // namespace runhooks
