// make_training_session: TensorFlow's MonitoredTrainingSession. A MonitoredSession with the
// default hooks of a chief (step counter, summaries, checkpoints), checkpoint restore on creation
// and recovery, chief-only hooks, and SignalStopHook.
#pragma once

#include <runhooks/detail/config.hpp>

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
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/forwarding_hook.hpp>
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
  explicit Conditional(std::optional<Hook> hook) : hook_(std::move(hook)) {}

  bool enabled() const noexcept { return hook_.has_value(); }
  // The hook, or nullptr when it is off.
  detail::unwrap_hook_t<Hook>* get() noexcept { return hook_ ? &detail::unwrap(*hook_) : nullptr; }

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
  r.step_counter = has_summary_dir && o.log_step_count_steps > 0;
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
template <class T>
inline constexpr bool is_plain_hook = !is_chief_only_bundle<T> && !is_scalars<T> && !is_histograms<T>;


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
// (runhooks::link_hooks) and whose stop grace period is the options'.
template <class Creator, class... Hooks>
class MonitoredTrainingSession : public MonitoredSession<Creator, Hooks...> {
  using base = MonitoredSession<Creator, Hooks...>;

 public:
  MonitoredTrainingSession(double stop_grace_period_secs, Creator creator, Hooks... hooks)
      : base(std::move(creator), std::move(hooks)...) {
    this->set_stop_grace_period_secs(stop_grace_period_secs);
    link_hooks(static_cast<base&>(*this));
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

// SummaryOutput behind a pointer: default-constructible, as Clang needs every output of a
// StepCounterHook held in a std::optional to be (its constructor's `Output output = {}` default
// argument is instantiated by std::is_constructible).
struct SharedSummaryOutput {
  std::shared_ptr<SummaryOutput> output;
  void open(const StepCounterOptions& options) { output->open(options); }
  void start(std::int64_t global_step) { output->start(global_step); }
  void record(std::string_view tag, double steps_per_sec, std::int64_t global_step) {
    output->record(tag, steps_per_sec, global_step);
  }
};

using DefaultStepCounter = StepCounterHook<SteadyClock, SharedSummaryOutput>;

}  // namespace detail

// TensorFlow's MonitoredTrainingSession. `factory` makes a fresh backend (at the start and at
// every recovery); the other arguments, in any order, are hooks, runhooks::chief_only(hooks...)
// and the keys of the default SummarySaverHook (runhooks::scalars<...>,
// runhooks::histograms<...>). The session's hooks, in TensorFlow's order (§1.10):
//   1. the chief-only hooks;
//   2. StepCounterHook(every_n_steps = log_step_count_steps) writing global_step/sec to
//      summary_dir (default checkpoint_dir), if that is set and log_step_count_steps > 0;
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
        "', but the backend cannot be checkpointed: give it save(prefix) and restore(prefix) "
        "(<runhooks/checkpoint/checkpointable.hpp>), or leave checkpoint_dir empty.");
  }

  using ScalarKeys = typename detail::collect_keys<Scalars<>, Args...>::type;
  using HistogramKeys = typename detail::collect_keys<Histograms<>, Args...>::type;
  constexpr bool has_summary_keys = !std::is_same_v<ScalarKeys, Scalars<>> ||
                                    !std::is_same_v<HistogramKeys, Histograms<>>;

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
      auto counter = detail::conditional<detail::DefaultStepCounter>(r.step_counter, [&] {
        return detail::DefaultStepCounter(
            StepCounterOptions{.every_n_steps = options.log_step_count_steps},
            detail::SharedSummaryOutput{std::make_shared<SummaryOutput>(r.summary_dir)});
      });
      auto summaries = [&] {
        if constexpr (has_summary_keys) {
          using Saver = SummarySaverHook<ScalarKeys, HistogramKeys, EventFileSummaryWriter>;
          return std::tuple(detail::conditional<Saver>(r.summaries, [&] {
            return Saver(SummarySaverOptions{.save_steps = r.summary_steps,
                                             .save_secs = r.summary_secs},
                         EventFileSummaryWriter(r.summary_dir), ScalarKeys{}, HistogramKeys{});
          }));
        } else {
          return std::tuple<>();
        }
      }();
      auto checkpoints = [&] {
        if constexpr (Checkpointable<Backend>) {
          const std::string dir = r.checkpoint_dir.string();
          return std::tuple(detail::conditional<CheckpointSaverHook<>>(r.checkpoints, [&] {
            return CheckpointSaverHook<>(CheckpointSaverOptions{
                .checkpoint_dir = dir,
                .save_steps = r.checkpoint_steps,
                .save_secs = r.checkpoint_steps ? std::nullopt : r.checkpoint_secs});
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

  TrainingSessionCreator<Factory> creator(std::move(factory), r.checkpoint_dir, is_chief,
                                          options.max_wait_secs);
  return std::apply(
      [&](auto&&... hooks) {
        return MonitoredTrainingSession<TrainingSessionCreator<Factory>,
                                        std::remove_cvref_t<decltype(hooks)>...>(
            options.stop_grace_period_secs, std::move(creator), std::move(hooks)...);
      },
      std::tuple_cat(std::move(chief_hooks), std::move(defaults), std::move(others),
                     std::move(signals)));
}

}  // namespace runhooks
