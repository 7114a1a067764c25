// make_training_session: TensorFlow's MonitoredTrainingSession. A MonitoredSession with the
// default hooks of a chief (step counter, summaries, checkpoints), checkpoint restore on creation
// and recovery, chief-only hooks, and SignalStopHook. The public face: each concern behind it has
// its own header under training_session/:
//   options.hpp     TrainingSessionOptions, their checks, Role, what USE_DEFAULT resolves to;
//   chief_only.hpp  chief_only(hooks...) and Conditional, a hook on or off from construction;
//   arguments.hpp   the arguments sorted by kind (hooks, bundles, summary keys, a clock);
//   creator.hpp     TrainingSessionCreator: the backend, restored; a worker waits for the chief;
//   session.hpp     MonitoredTrainingSession: the session, its default hooks read back.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/training_session/arguments.hpp>
#include <runhooks/training_session/chief_only.hpp>
#include <runhooks/training_session/creator.hpp>
#include <runhooks/training_session/options.hpp>
#include <runhooks/training_session/session.hpp>

namespace runhooks {

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
// checkpoint_dir on creation and on every recovery (TrainingSessionCreator), and with it the
// states of the other hooks that have one (StatefulHook: EarlyStoppingHook, SpikeHook, ...),
// which every checkpoint carries: when there is such a hook, the saver (4) comes after the other
// hooks (5), so that it saves their states of the step it saves (runhooks; TensorFlow's order
// otherwise). TensorFlow's
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

  // 2-3. The default hooks of a chief, but its checkpoint saver.
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
      return std::tuple_cat(std::tuple(std::move(counter)), std::move(summaries));
    }
  }();

  // 4. The checkpoint saver of a chief.
  auto checkpoints = [&] {
    if constexpr (R == Role::worker || !Checkpointable<Backend>) {
      return std::tuple<>();
    } else {
      const std::string dir = r.checkpoint_dir.string();
      return std::tuple(detail::conditional<CheckpointSaverHook<C>>(r.checkpoints, [&] {
        return CheckpointSaverHook<C>(
            CheckpointSaverOptions{.checkpoint_dir = dir,
                                   .save_steps = r.checkpoint_steps,
                                   .save_secs = r.checkpoint_steps ? std::nullopt
                                                                   : r.checkpoint_secs},
            clock);
      }));
    }
  }();

  // 5. The other hooks; 6. SignalStopHook.
  auto others = std::apply([](auto&... hook) { return std::tuple(std::move(hook)...); }, plain);
  auto signals = std::tuple(detail::conditional<SignalStopHook>(options.stop_on_signals,
                                                                [] { return SignalStopHook(); }));

  // Where the default hooks are, for the session's step_counter(), summary_saver() and
  // checkpoint_saver(). With a stateful hook among the others (StatefulHook: EarlyStoppingHook,
  // SpikeHook, ...), the checkpoint saver follows them, so that it saves their states of the
  // step it saves (hook_state.hpp).
  constexpr std::size_t chief_count = std::tuple_size_v<decltype(chief_hooks)>;
  constexpr std::size_t default_count = std::tuple_size_v<decltype(defaults)>;
  constexpr std::size_t other_count = std::tuple_size_v<decltype(others)>;
  constexpr bool has_defaults = R != Role::worker;
  constexpr bool saver_last = []<class... Hs>(std::tuple<Hs...>*) {
    return (... || StatefulHook<detail::unwrap_hook_t<Hs>>);
  }(static_cast<decltype(others)*>(nullptr));
  using Layout = detail::DefaultHookLayout<
      C, SummarySaver, has_defaults ? chief_count : detail::no_hook,
      has_defaults && has_summary_keys ? chief_count + 1 : detail::no_hook,
      has_defaults && Checkpointable<Backend>
          ? chief_count + default_count + (saver_last ? other_count : 0)
          : detail::no_hook>;

  TrainingSessionCreator<Factory> creator(std::move(factory), r.checkpoint_dir, is_chief,
                                          options.max_wait_secs);
  auto all = [&] {
    if constexpr (saver_last)
      return std::tuple_cat(std::move(chief_hooks), std::move(defaults), std::move(others),
                            std::move(checkpoints), std::move(signals));
    else
      return std::tuple_cat(std::move(chief_hooks), std::move(defaults), std::move(checkpoints),
                            std::move(others), std::move(signals));
  }();
  return detail::make_monitored_training_session<Layout>(
      options.stop_grace_period_secs, std::move(creator), std::move(all));
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
