// MonitoredTrainingSession: the session make_training_session returns, which links its hooks and
// reads its default hooks (step counter, summary saver, checkpoint saver) back by where they are.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/clock.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/training_session/chief_only.hpp>

namespace runhooks {

namespace detail {

// A default hook that is not in the session's type (see DefaultHookLayout).
inline constexpr std::size_t no_hook = static_cast<std::size_t>(-1);
// The summary saver of a session without summary keys, which has none: summary_saver() returns
// a null pointer to this incomplete type.
struct NoSummarySaver;

}  // namespace detail

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

// SummaryOutput behind a pointer, so that the chart can be left out: no SummaryOutput, the log
// line only (TrainingSessionOptions::step_rate_chart false).
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
}  // namespace runhooks
