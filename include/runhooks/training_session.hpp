// make_training_session: TensorFlow's MonitoredTrainingSession. A MonitoredSession with the
// default hooks of a chief (step counter, summaries, checkpoints), checkpoint restore on creation
// and recovery, chief-only hooks, and SignalStopHook.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/forwarding_hook.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/session_creator.hpp>

namespace runhooks {

namespace detail {

struct CheckedTrainingOptions {};

// The checks of TrainingSessionOptions, run as the options are made: options declared constexpr
// with a mistake do not compile (the message below shows in the error); at run time a mistake
// is std::invalid_argument naming the option and value.
constexpr CheckedTrainingOptions check_training_options(
    const std::optional<double>& save_checkpoint_secs,
    const std::optional<std::int64_t>& save_checkpoint_steps,
    const std::optional<std::int64_t>& save_summaries_steps,
    const std::optional<double>& save_summaries_secs, std::int64_t log_step_count_steps,
    double stop_grace_period_secs, double max_wait_secs) {
  // TensorFlow's documentation says save_checkpoint_secs wins when both are given; its code
  // passes both to CheckpointSaverHook, whose timer then raises. Both is a mistake here.
  if (save_checkpoint_secs && save_checkpoint_steps) {
    if (std::is_constant_evaluated()) throw "runhooks: TrainingSessionOptions sets both save_checkpoint_secs and save_checkpoint_steps; set one (TensorFlow's documentation and code disagree on what both mean)";
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions sets both save_checkpoint_secs (" +
        format_number(*save_checkpoint_secs) + ") and save_checkpoint_steps (" +
        std::to_string(*save_checkpoint_steps) +
        "); set one (TensorFlow's documentation and code disagree on what both mean).");
  }
  if (save_summaries_steps && save_summaries_secs) {
    if (std::is_constant_evaluated()) throw "runhooks: TrainingSessionOptions sets both save_summaries_steps and save_summaries_secs; set one";
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions sets both save_summaries_steps (" +
        std::to_string(*save_summaries_steps) + ") and save_summaries_secs (" +
        format_number(*save_summaries_secs) + "); set one.");
  }
  // 0 switches a default hook off, as in TensorFlow; below 0 is a mistake.
  if ((save_checkpoint_steps && *save_checkpoint_steps < 0) ||
      (save_summaries_steps && *save_summaries_steps < 0) || log_step_count_steps < 0) {
    if (std::is_constant_evaluated()) throw "runhooks: TrainingSessionOptions: save_checkpoint_steps, save_summaries_steps and log_step_count_steps must be at least 0 (0: off)";
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions: save_checkpoint_steps, save_summaries_steps and "
        "log_step_count_steps must be at least 0 (0: off), got " +
        std::to_string(save_checkpoint_steps.value_or(0)) + ", " +
        std::to_string(save_summaries_steps.value_or(0)) + ", " +
        std::to_string(log_step_count_steps) + ".");
  }
  if (save_checkpoint_secs)
    checked_secs("TrainingSessionOptions::save_checkpoint_secs", *save_checkpoint_secs);
  if (save_summaries_secs)
    checked_secs("TrainingSessionOptions::save_summaries_secs", *save_summaries_secs);
  checked_secs("TrainingSessionOptions::stop_grace_period_secs", stop_grace_period_secs);
  checked_secs("TrainingSessionOptions::max_wait_secs", max_wait_secs);
  return {};
}

}  // namespace detail

// TensorFlow's MonitoredTrainingSession arguments. Unset optionals are TensorFlow's USE_DEFAULT:
// with neither checkpoint option set, a checkpoint every 600 s; with neither summary option,
// summaries every 100 steps; a value of 0 switches that hook off.
struct TrainingSessionOptions {
  // The chief saves checkpoints and summaries and runs the chief-only hooks; workers restore the
  // chief's checkpoints. make_training_session<Role::chief> or <Role::worker> fixes it at compile
  // time instead.
  bool is_chief = true;
  std::string_view checkpoint_dir{};  // restore from and save to; empty: no checkpoints
  std::optional<double> save_checkpoint_secs{};
  std::optional<std::int64_t> save_checkpoint_steps{};
  std::optional<std::int64_t> save_summaries_steps{};
  std::optional<double> save_summaries_secs{};
  std::int64_t log_step_count_steps = 100;  // StepCounterHook; 0: none
  // What the StepCounterHook does with each global_step/sec it measures, chosen apart (both,
  // TensorFlow's, by default; neither is log_step_count_steps = 0): a log line, and a point of
  // the global_step/sec chart in summary_dir's event file.
  bool step_rate_log_line = true;
  bool step_rate_chart = true;
  std::string_view summary_dir{};          // empty: checkpoint_dir
  double stop_grace_period_secs = 120.0;   // see MonitoredSession::set_stop_grace_period_secs
  double max_wait_secs = 7200.0;           // how long a worker waits for the chief's checkpoint
  bool stop_on_signals = true;             // SignalStopHook: SIGINT/SIGTERM end the loop cleanly
  // Checks the fields above as the options are made (never set it yourself).
  [[no_unique_address]] detail::CheckedTrainingOptions checked = detail::check_training_options(
      save_checkpoint_secs, save_checkpoint_steps, save_summaries_steps, save_summaries_secs,
      log_step_count_steps, stop_grace_period_secs, max_wait_secs);

  // The same checks, for options changed after they were made.
  constexpr const TrainingSessionOptions& validate() const {
    detail::check_training_options(save_checkpoint_secs, save_checkpoint_steps,
                                   save_summaries_steps, save_summaries_secs, log_step_count_steps,
                                   stop_grace_period_secs, max_wait_secs);
    return *this;
  }
};

// Whether a session is the chief: decided at run time (TrainingSessionOptions::is_chief; every
// chief-only hook point costs one predictable branch) or at compile time (no cost: a worker's
// session type has no chief-only hook at all).
enum class Role { runtime, chief, worker };

// Hooks only the chief runs (TensorFlow's chief_only_hooks):
//   runhooks::make_training_session(options, factory, my_hook, runhooks::chief_only(saver, logger))
template <class... Hooks>
struct ChiefOnlyHooks {
  std::tuple<Hooks...> hooks;
};
template <class... Hooks>
ChiefOnlyHooks<Hooks...> chief_only(Hooks... hooks) {
  return {std::tuple<Hooks...>(std::move(hooks)...)};
}

// A hook that runs only when enabled at construction (a default hook whose option is off, a
// chief-only hook on a worker): every point it defines costs one test of a flag, and a before_run
// that fetches returns its fetches switched off.
template <class Hook>
class Conditional : public detail::forwarding_hook<Conditional<Hook>, detail::unwrap_hook_t<Hook>> {
 public:
  using hook_type = detail::unwrap_hook_t<Hook>;

  explicit Conditional(std::optional<Hook> hook) : hook_(std::move(hook)) {}

  bool enabled() const noexcept { return hook_.has_value(); }
  // The hook, or nullptr when it is off.
  detail::unwrap_hook_t<Hook>* get() noexcept { return hook_ ? &detail::unwrap(*hook_) : nullptr; }
  const detail::unwrap_hook_t<Hook>* get() const noexcept {
    return hook_ ? &detail::unwrap(*hook_) : nullptr;
  }

  detail::unwrap_hook_t<Hook>& inner() noexcept { return detail::unwrap(*hook_); }
  bool forwarding() const noexcept { return hook_.has_value(); }
  template <class Ctx>
  Ctx& context(Ctx& run_context) const noexcept {
    return run_context;
  }

  // runhooks::link_hooks passes on to the hook.
  template <class... Hooks>
  void link(const Hooks&... hooks) {
    if constexpr (requires(detail::unwrap_hook_t<Hook>& h) { h.link(hooks...); })
      if (hook_) inner().link(hooks...);
  }

  // A StopSource (SignalStopHook) stays one when it is on: the session asks it while it creates
  // or re-creates the backend, where no hook point runs.
  bool stop_requested()
    requires StopSource<detail::unwrap_hook_t<Hook>>
  {
    return hook_ && static_cast<bool>(inner().stop_requested());
  }
  std::string stop_reason()
    requires StopSource<detail::unwrap_hook_t<Hook>>
  {
    return hook_ ? std::string(inner().stop_reason()) : std::string();
  }

 private:
  std::optional<Hook> hook_;
};

namespace detail {

// What TensorFlow's USE_DEFAULT resolves to.
struct ResolvedTrainingOptions {
  std::filesystem::path checkpoint_dir, summary_dir;
  std::optional<double> checkpoint_secs;
  std::optional<std::int64_t> checkpoint_steps;
  std::optional<std::int64_t> summary_steps;
  std::optional<double> summary_secs;
  bool checkpoints = false, summaries = false, step_counter = false;
};

inline ResolvedTrainingOptions resolve(const TrainingSessionOptions& o, bool is_chief) {
  ResolvedTrainingOptions r;
  r.checkpoint_dir = std::filesystem::path(o.checkpoint_dir);
  r.summary_dir = o.summary_dir.empty() ? r.checkpoint_dir : std::filesystem::path(o.summary_dir);
  r.summary_steps = o.save_summaries_steps;
  r.summary_secs = o.save_summaries_secs;
  if (!r.summary_steps && !r.summary_secs) r.summary_steps = 100;
  r.checkpoint_secs = o.save_checkpoint_secs;
  r.checkpoint_steps = o.save_checkpoint_steps;
  if (!r.checkpoint_secs && !r.checkpoint_steps) r.checkpoint_secs = 600.0;
  if (!is_chief) return r;  // a worker has no default hooks
  const bool has_summary_dir = !r.summary_dir.empty();
  r.step_counter = has_summary_dir && o.log_step_count_steps > 0 &&
                   (o.step_rate_log_line || o.step_rate_chart);
  r.summaries = has_summary_dir && (r.summary_steps.value_or(0) > 0 || r.summary_secs.value_or(0.0) > 0.0);
  r.checkpoints = !r.checkpoint_dir.empty() &&
                  (r.checkpoint_steps.value_or(0) > 0 || r.checkpoint_secs.value_or(0.0) > 0.0);
  // A period of 0 is "off"; the hook that stays on gets the other one only.
  if (r.summary_steps == 0) r.summary_steps.reset();
  if (r.summary_secs == 0.0) r.summary_secs.reset();
  if (r.checkpoint_steps == 0) r.checkpoint_steps.reset();
  if (r.checkpoint_secs == 0.0) r.checkpoint_secs.reset();
  return r;
}

// Sorts make_training_session's arguments by kind.
template <class T>
inline constexpr bool is_chief_only_bundle = false;
template <class... Hs>
inline constexpr bool is_chief_only_bundle<ChiefOnlyHooks<Hs...>> = true;
template <class T>
inline constexpr bool is_scalars = false;
template <class... Ks>
inline constexpr bool is_scalars<Scalars<Ks...>> = true;
template <class T>
inline constexpr bool is_histograms = false;
template <class... Ks>
inline constexpr bool is_histograms<Histograms<Ks...>> = true;
// A clock among the arguments (runhooks::ManualClock in tests): something with now() and no
// hook point. A hook with a now() member stays a hook.
template <class T>
inline constexpr bool is_clock_argument = Clock<T> && !names_any_hook_point<T>;
template <class T>
inline constexpr bool is_plain_hook =
    !is_chief_only_bundle<T> && !is_scalars<T> && !is_histograms<T> && !is_clock_argument<T>;

// The clock of the timed default hooks: the clock argument, or SteadyClock.
template <class... Args>
struct clock_of {
  using type = SteadyClock;
};
template <class First, class... Rest>
struct clock_of<First, Rest...> {
  using type = std::conditional_t<is_clock_argument<First>, First,
                                  typename clock_of<Rest...>::type>;
};


// The keys of every Scalars<...> (or Histograms<...>) argument, in order.
template <class Arg, class Acc>
struct join_keys {
  using type = Acc;  // an argument of another kind
};
template <class... A, class... B>
struct join_keys<Scalars<A...>, Scalars<B...>> {
  using type = Scalars<A..., B...>;
};
template <class... A, class... B>
struct join_keys<Histograms<A...>, Histograms<B...>> {
  using type = Histograms<A..., B...>;
};
template <class Empty, class... Args>
struct collect_keys {
  using type = Empty;
};
template <class Empty, class First, class... Rest>
struct collect_keys<Empty, First, Rest...> {
  using type = typename join_keys<First, typename collect_keys<Empty, Rest...>::type>::type;
};

// The arguments of one kind, as a tuple of references.
template <template <class> class Keep, class... Args>
auto select(Args&... args) {
  return std::tuple_cat([&]() -> decltype(auto) {
    if constexpr (Keep<Args>::value)
      return std::tuple<Args&>(args);
    else
      return std::tuple<>();
  }()...);
}
template <class T>
struct keep_plain : std::bool_constant<is_plain_hook<T>> {};
template <class T>
struct keep_bundle : std::bool_constant<is_chief_only_bundle<T>> {};
template <class T>
struct keep_clock : std::bool_constant<is_clock_argument<T>> {};

template <class T>
inline constexpr bool is_conditional = false;
template <class H>
inline constexpr bool is_conditional<Conditional<H>> = true;

// A default hook that is not in the session's type (see DefaultHookLayout).
inline constexpr std::size_t no_hook = static_cast<std::size_t>(-1);
// The summary saver of a session without summary keys, which has none: summary_saver() returns
// a null pointer to this incomplete type.
struct NoSummarySaver;

}  // namespace detail

// TensorFlow's session creators for MonitoredTrainingSession, for a backend factory. A
// Checkpointable backend is restored as ChiefSessionCreator restores it, from the latest
// checkpoint of checkpoint_dir, on creation and on every recovery; on a worker the first creation
// first waits up to max_wait_secs for the chief's first checkpoint (TensorFlow's
// WorkerSessionCreator waits that long for the chief to initialize, then fails with
// DeadlineExceededError "Session was not ready after waiting N secs."). Any other backend, or no
// checkpoint_dir: the factory's fresh backend.
template <BackendFactory Factory>
class TrainingSessionCreator {
 public:
  using backend_type = std::remove_cvref_t<std::invoke_result_t<Factory&>>;

  TrainingSessionCreator(Factory factory, std::filesystem::path checkpoint_dir, bool is_chief,
                         double max_wait_secs)
      : inner_(make_inner(std::move(factory), checkpoint_dir)),
        checkpoint_dir_(std::move(checkpoint_dir)), is_chief_(is_chief),
        max_wait_secs_(max_wait_secs) {}

  backend_type create_session() { return inner_.create_session(); }

  void initialize(backend_type& backend) {
    if constexpr (Checkpointable<backend_type>) {
      if (!is_chief_ && !checkpoint_dir_.empty()) wait_for_chief();
      inner_.initialize(backend);
    } else {
      (void)backend;
    }
  }

  const RetryForever& policy() const noexcept { return policy_; }
  bool is_chief() const noexcept { return is_chief_; }

 private:
  using inner_type = std::conditional_t<Checkpointable<backend_type>, ChiefSessionCreator<Factory>,
                                        SessionCreator<Factory>>;

  static inner_type make_inner(Factory factory, const std::filesystem::path& checkpoint_dir) {
    if constexpr (Checkpointable<backend_type>) {
      const std::string dir = checkpoint_dir.string();
      return inner_type(std::move(factory), ChiefSessionOptions{.checkpoint_dir = dir});
    } else {
      return inner_type(std::move(factory));
    }
  }

  // Polls for the chief's checkpoint every 0.25 s. A signal SignalStopHook caught (make_training_
  // session installs it, from begin(), before this runs) ends the wait at once with an
  // UnavailableError: the session's recovery then finds the stop before its first retry and stops
  // without a backend (a stop always wins over creation and recovery).
  void wait_for_chief() {
    if (latest_checkpoint(checkpoint_dir_)) return;
    log(Severity::info, "runhooks: waiting up to " + detail::format_number(max_wait_secs_) +
                            " s for the chief's first checkpoint in " +
                            checkpoint_dir_.string() + ".");
    const auto signalled = [] { return SignalStopHook::stop_requested(); };
    double waited = 0.0;
    while (!latest_checkpoint(checkpoint_dir_)) {
      if (waited >= max_wait_secs_)
        throw DeadlineExceededError("Session was not ready after waiting " +
                                    detail::format_number(max_wait_secs_) +
                                    " secs. (runhooks: no checkpoint in " +
                                    checkpoint_dir_.string() + ")");
      const double nap = max_wait_secs_ - waited < 0.25 ? max_wait_secs_ - waited : 0.25;
      if (detail::wait_unless_stopped(nap, signalled))
        throw UnavailableError("runhooks: a signal stopped the wait for the chief's first "
                               "checkpoint in " + checkpoint_dir_.string() + ".");
      waited += nap;
    }
  }

  inner_type inner_;
  std::filesystem::path checkpoint_dir_;
  bool is_chief_;
  double max_wait_secs_;
  [[no_unique_address]] RetryForever policy_{};
};

// The session make_training_session returns: a MonitoredSession whose hooks were linked
// (runhooks::link_hooks) and whose stop grace period is the options'. The default hooks it
// built can be read back, with their settings (options(), the checkpoint directory, ...):
//   step_counter()      the StepCounterHook (log_step_count_steps, summary_dir);
//   summary_saver()     the SummarySaverHook (save_summaries_steps | _secs, summary_dir);
//   checkpoint_saver()  the CheckpointSaverHook (checkpoint_dir, save_checkpoint_secs | _steps);
// each a pointer, nullptr when that hook is off: on a worker, with a period of 0, without a
// directory, without summary keys, for a backend that cannot be checkpointed. Any other hook:
// find_hook<Hook>(), which looks through the on/off wrapper (Conditional) of the chief-only
// hooks, or hook<I>() by position in make_training_session's order.
template <class Creator, class Layout, class... Hooks>
class MonitoredTrainingSession : public MonitoredSession<Creator, Hooks...> {
  using base = MonitoredSession<Creator, Hooks...>;

 public:
  // The clock of the timed default hooks.
  using clock_type = typename Layout::clock_type;
  using step_counter_type = typename Layout::step_counter_type;
  using summary_saver_type = typename Layout::summary_saver_type;
  using checkpoint_saver_type = typename Layout::checkpoint_saver_type;

  MonitoredTrainingSession(double stop_grace_period_secs, Creator creator, Hooks... hooks)
      : base(std::move(creator), std::move(hooks)...) {
    this->set_stop_grace_period_secs(stop_grace_period_secs);
    link_hooks(static_cast<base&>(*this));
  }

  step_counter_type* step_counter() noexcept {
    return default_hook<Layout::step_counter_at, step_counter_type>();
  }
  summary_saver_type* summary_saver() noexcept {
    return default_hook<Layout::summary_saver_at, summary_saver_type>();
  }
  checkpoint_saver_type* checkpoint_saver() noexcept {
    return default_hook<Layout::checkpoint_saver_at, checkpoint_saver_type>();
  }

  // The first hook of type Hook that is on (held by value, through std::ref, or in a
  // Conditional that is on), or nullptr.
  template <class Hook>
  Hook* find_hook() noexcept {
    return find_from<Hook, 0>();
  }

 private:
  template <std::size_t I, class Hook>
  Hook* default_hook() noexcept {
    if constexpr (I == detail::no_hook)
      return nullptr;
    else
      return this->template hook<I>().get();  // a Conditional: nullptr when off
  }

  template <class Hook, std::size_t I>
  Hook* find_from() noexcept {
    if constexpr (I == sizeof...(Hooks)) {
      return nullptr;
    } else {
      auto& hook = this->template hook<I>();
      using H = std::remove_cvref_t<decltype(hook)>;
      Hook* found = nullptr;
      if constexpr (std::is_same_v<H, Hook>)
        found = &hook;
      else if constexpr (detail::is_conditional<H>)
        if constexpr (std::is_same_v<typename H::hook_type, Hook>) found = hook.get();
      return found ? found : find_from<Hook, I + 1>();
    }
  }
};

namespace detail {

template <Role R, class Hook>
auto chief_only_hook(Hook hook, bool is_chief) {
  if constexpr (R == Role::chief)
    return hook;
  else
    return Conditional<Hook>(is_chief ? std::optional<Hook>(std::move(hook)) : std::nullopt);
}

template <class Hook, class Make>
Conditional<Hook> conditional(bool on, Make make) {
  return Conditional<Hook>(on ? std::optional<Hook>(make()) : std::nullopt);
}

// The session of a tuple of hooks (outside make_training_session: GCC 12 rejects a Layout made
// of its local constants inside its lambdas).
template <class Layout, class Creator, class... Hooks>
MonitoredTrainingSession<Creator, Layout, Hooks...> make_monitored_training_session(
    double stop_grace_period_secs, Creator creator, std::tuple<Hooks...> hooks) {
  return std::apply(
      [&](Hooks&... hook) {
        return MonitoredTrainingSession<Creator, Layout, Hooks...>(
            stop_grace_period_secs, std::move(creator), std::move(hook)...);
      },
      hooks);
}

// SummaryOutput behind a pointer: default-constructible, as Clang needs every output of a
// StepCounterHook held in a std::optional to be (its constructor's `Output output = {}` default
// argument is instantiated by std::is_constructible). No SummaryOutput: the log line only
// (TrainingSessionOptions::step_rate_chart false).
struct SharedSummaryOutput {
  std::shared_ptr<SummaryOutput> output;
  void open(const StepCounterOptions& options) {
    if (output) output->open(options);
  }
  void start(std::int64_t global_step) {
    if (output) output->start(global_step);
  }
  void record(std::string_view tag, double steps_per_sec, std::int64_t global_step) {
    if (output)
      output->record(tag, steps_per_sec, global_step);
    else
      LogOutput{}.record(tag, steps_per_sec, global_step);
  }
};

template <Clock C = SteadyClock>
using DefaultStepCounter = StepCounterHook<C, SharedSummaryOutput>;

// Where make_training_session put its default hooks in the session's list, and their types;
// no_hook for one that is not in the session's type (a Role::worker session, a summary saver
// without keys, a checkpoint saver for a backend that cannot be checkpointed).
template <Clock C, class SummarySaver, std::size_t CounterAt, std::size_t SummariesAt,
          std::size_t CheckpointsAt>
struct DefaultHookLayout {
  using clock_type = C;
  using step_counter_type = DefaultStepCounter<C>;
  using summary_saver_type = SummarySaver;
  using checkpoint_saver_type = CheckpointSaverHook<C>;
  static constexpr std::size_t step_counter_at = CounterAt;
  static constexpr std::size_t summary_saver_at = SummariesAt;
  static constexpr std::size_t checkpoint_saver_at = CheckpointsAt;
};

}  // namespace detail

// TensorFlow's MonitoredTrainingSession. `factory` makes a fresh backend (at the start and at
// every recovery); the other arguments, in any order, are hooks, runhooks::chief_only(hooks...),
// the keys of the default SummarySaverHook (runhooks::scalars<...>,
// runhooks::histograms<...>), and at most one Clock (by convention the last argument, as the
// hooks take theirs after their options): the clock of every timed default hook, the step
// counter, the summary saver and the checkpoint saver (std::chrono::steady_clock without one;
// runhooks::ManualClock in tests makes save_checkpoint_secs and save_summaries_secs testable:
//   runhooks::ManualClock clock;
//   auto session = make_training_session({.checkpoint_dir = dir, .save_checkpoint_secs = 10},
//                                        factory, clock);
//   clock.advance(10);  // the next run() saves
// ). The session's hooks, in TensorFlow's order (§1.10), reachable from the session (see
// MonitoredTrainingSession: step_counter(), summary_saver(), checkpoint_saver(), find_hook<H>()):
//   1. the chief-only hooks;
//   2. StepCounterHook(every_n_steps = log_step_count_steps) logging global_step/sec
//      (step_rate_log_line) and writing it to summary_dir (default checkpoint_dir;
//      step_rate_chart), if that is set, log_step_count_steps > 0 and either is true;
//   3. SummarySaverHook(save_summaries_steps | save_summaries_secs, summary_dir) of the keys
//      given, if there are keys, summary_dir is set and the period is not 0;
//   4. CheckpointSaverHook(checkpoint_dir, save_checkpoint_secs | save_checkpoint_steps), if the
//      backend is Checkpointable, checkpoint_dir is set and the period is not 0;
//   5. the other hooks;
//   6. SignalStopHook (SIGINT, SIGTERM), unless stop_on_signals is false.
// 1 to 4 run on the chief only. The backend is restored from the latest checkpoint of
// checkpoint_dir on creation and on every recovery (TrainingSessionCreator). TensorFlow's
// defaults: a checkpoint every 600 s, summaries every 100 steps, the step rate every 100 steps.
//
// Costs: with Role::runtime each point of a chief-only or default hook tests one flag (on a
// worker, or when its option is off); with Role::chief or Role::worker the role costs nothing
// (a worker's session has none of those hooks), and a default hook whose option is off still
// tests its flag.
//
// Differs from TensorFlow: both save_checkpoint_secs and save_checkpoint_steps (or both summary
// options) are an error, at compile time for constexpr options (TensorFlow's documentation says
// secs wins, its code raises); summaries are the keys given (there is no graph to merge_all);
// no graph.pbtxt or meta graph is written.
//
// Event files: one per directory in the process (EventFileWriterCache, TensorFlow's
// FileWriterCache). With the defaults (summary_dir = checkpoint_dir) the step counter, the
// summary saver and the checkpoint saver write one file: global_step/sec and the summaries, one
// SessionLog START per session at its first step, and a SessionLog CHECKPOINT after each save.
template <Role R = Role::runtime, BackendFactory Factory, class... Args>
auto make_training_session(const TrainingSessionOptions& options, Factory factory, Args... args) {
  options.validate();
  const bool is_chief = R == Role::runtime ? options.is_chief : R == Role::chief;
  const detail::ResolvedTrainingOptions r = detail::resolve(options, is_chief);
  using Backend = std::remove_cvref_t<std::invoke_result_t<Factory&>>;
  if (!Checkpointable<Backend> && r.checkpoints && is_chief) {
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions::checkpoint_dir is '" + r.checkpoint_dir.string() +
        "', but the backend cannot be checkpointed: give it `void save(const "
        "std::filesystem::path& prefix) const` and `void restore(const std::filesystem::path& "
        "prefix)` (<runhooks/checkpoint/checkpointable.hpp>), or leave checkpoint_dir empty.");
  }

  static_assert((0 + ... + detail::is_clock_argument<Args>) <= 1,
                "runhooks::make_training_session takes at most one clock (the clock of its timed "
                "default hooks); the arguments' types are named in this instantiation.");
  using C = typename detail::clock_of<Args...>::type;
  const C clock = [&] {
    if constexpr ((... || detail::is_clock_argument<Args>))
      return std::get<0>(detail::select<detail::keep_clock>(args...));
    else
      return C{};
  }();

  using ScalarKeys = typename detail::collect_keys<Scalars<>, Args...>::type;
  using HistogramKeys = typename detail::collect_keys<Histograms<>, Args...>::type;
  constexpr bool has_summary_keys = !std::is_same_v<ScalarKeys, Scalars<>> ||
                                    !std::is_same_v<HistogramKeys, Histograms<>>;

  using SummarySaver = std::conditional_t<
      has_summary_keys, SummarySaverHook<ScalarKeys, HistogramKeys, EventFileSummaryWriter, C>,
      detail::NoSummarySaver>;

  auto plain = detail::select<detail::keep_plain>(args...);
  auto bundles = detail::select<detail::keep_bundle>(args...);

  // 1. Chief-only hooks (none in a worker's session type when the role is compile-time).
  auto chief_hooks = [&] {
    if constexpr (R == Role::worker) {
      return std::tuple<>();
    } else {
      return std::apply(
          [&](auto&... bundle) {
            return std::tuple_cat(std::apply(
                [&](auto&... hook) {
                  return std::tuple(detail::chief_only_hook<R>(std::move(hook), is_chief)...);
                },
                bundle.hooks)...);
          },
          bundles);
    }
  }();

  // 2-4. The default hooks of a chief.
  auto defaults = [&] {
    if constexpr (R == Role::worker) {
      return std::tuple<>();
    } else {
      using Counter = detail::DefaultStepCounter<C>;
      auto counter = detail::conditional<Counter>(r.step_counter, [&] {
        return Counter(StepCounterOptions{.every_n_steps = options.log_step_count_steps}, clock,
                       detail::SharedSummaryOutput{
                           options.step_rate_chart
                               ? std::make_shared<SummaryOutput>(r.summary_dir,
                                                                 options.step_rate_log_line)
                               : nullptr});
      });
      auto summaries = [&] {
        if constexpr (has_summary_keys) {
          return std::tuple(detail::conditional<SummarySaver>(r.summaries, [&] {
            return SummarySaver(SummarySaverOptions{.save_steps = r.summary_steps,
                                                    .save_secs = r.summary_secs},
                                EventFileSummaryWriter(r.summary_dir), ScalarKeys{},
                                HistogramKeys{}, clock);
          }));
        } else {
          return std::tuple<>();
        }
      }();
      auto checkpoints = [&] {
        if constexpr (Checkpointable<Backend>) {
          const std::string dir = r.checkpoint_dir.string();
          return std::tuple(detail::conditional<CheckpointSaverHook<C>>(r.checkpoints, [&] {
            return CheckpointSaverHook<C>(
                CheckpointSaverOptions{
                    .checkpoint_dir = dir,
                    .save_steps = r.checkpoint_steps,
                    .save_secs = r.checkpoint_steps ? std::nullopt : r.checkpoint_secs},
                clock);
          }));
        } else {
          return std::tuple<>();
        }
      }();
      return std::tuple_cat(std::tuple(std::move(counter)), std::move(summaries),
                            std::move(checkpoints));
    }
  }();

  // 5. The other hooks; 6. SignalStopHook.
  auto others = std::apply([](auto&... hook) { return std::tuple(std::move(hook)...); }, plain);
  auto signals = std::tuple(detail::conditional<SignalStopHook>(options.stop_on_signals,
                                                                [] { return SignalStopHook(); }));

  // Where the default hooks are, for the session's step_counter(), summary_saver() and
  // checkpoint_saver().
  constexpr std::size_t chief_count = std::tuple_size_v<decltype(chief_hooks)>;
  constexpr bool has_defaults = R != Role::worker;
  using Layout = detail::DefaultHookLayout<
      C, SummarySaver, has_defaults ? chief_count : detail::no_hook,
      has_defaults && has_summary_keys ? chief_count + 1 : detail::no_hook,
      has_defaults && Checkpointable<Backend> ? chief_count + 1 + (has_summary_keys ? 1 : 0)
                                              : detail::no_hook>;

  TrainingSessionCreator<Factory> creator(std::move(factory), r.checkpoint_dir, is_chief,
                                          options.max_wait_secs);
  return detail::make_monitored_training_session<Layout>(
      options.stop_grace_period_secs, std::move(creator),
      std::tuple_cat(std::move(chief_hooks), std::move(defaults), std::move(others),
                     std::move(signals)));
}

// A second argument that is no backend factory: said here, since the catch-all below, the only
// other overload that would fit, speaks of the options.
template <Role R = Role::runtime, class Factory, class... Args>
  requires(!BackendFactory<Factory>)
void make_training_session(const TrainingSessionOptions&, Factory, Args...) {
  static_assert(BackendFactory<Factory>,
                "runhooks::make_training_session's second argument makes a fresh backend: a "
                "callable with no argument returning a backend (`[] { return Trainer{}; }`), not "
                "the backend itself; its type is named in this instantiation.");
}

// Chosen when the arguments fit no make_training_session above, most often braced options with
// a misspelt field: the error names TrainingSessionOptions and its fields
// (detail/no_constructor_fits.hpp says why the compiler cannot name the field in that form).
template <Role R = Role::runtime,
          class Hint = detail::write_the_options_type<
              TrainingSessionOptions, &TrainingSessionOptions::is_chief,
              &TrainingSessionOptions::checkpoint_dir, &TrainingSessionOptions::save_checkpoint_secs,
              &TrainingSessionOptions::save_checkpoint_steps,
              &TrainingSessionOptions::save_summaries_steps,
              &TrainingSessionOptions::save_summaries_secs,
              &TrainingSessionOptions::log_step_count_steps,
              &TrainingSessionOptions::step_rate_log_line, &TrainingSessionOptions::step_rate_chart,
              &TrainingSessionOptions::summary_dir, &TrainingSessionOptions::stop_grace_period_secs,
              &TrainingSessionOptions::max_wait_secs, &TrainingSessionOptions::stop_on_signals,
              &TrainingSessionOptions::checked>>
Hint make_training_session(...) = delete;  // Misspelt field? Write TrainingSessionOptions{...} to see which

}  // namespace runhooks
