// EvaluationHook: the backend's evaluation every N steps or seconds, its metrics logged, written
// beside the training summaries and produced as keys for the hooks declared after it.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/hana/at.hpp>
#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/unpack.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
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
#include <runhooks/detail/type_list.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/summary/detail/event_encoding.hpp>
#include <runhooks/summary/event_file_writer.hpp>
#include <runhooks/summary/event_writer_cache.hpp>

namespace runhooks {

struct EvaluationOptions {
  // Exactly one (TensorFlow's SecondOrStepTimer): global steps (runs of this session for a
  // backend without one), at least 1; or seconds, greater than 0 and at most 1e9.
  std::optional<std::int64_t> every_n_steps{};
  std::optional<double> every_n_secs{};
  // Evaluate before the first step, in after_create_session (TensorFlow's InMemoryEvaluatorHook).
  bool at_start = true;
  // Evaluate at the end: on the step on which a hook declared before this one asked to stop,
  // else in end() unless the last step was evaluated already.
  bool at_end = true;
  // Empty: no event file. Else each evaluation's metrics are scalars in <output_dir>/eval, a
  // second TensorBoard run beside the training one. Copied when the hook is made.
  std::string_view output_dir{};
  // Log "eval at step N: loss = ..., accuracy = ..." (runhooks::log, info) after each evaluation.
  bool log = true;

  // std::invalid_argument naming the option and value, or a compile error when constexpr.
  constexpr const EvaluationOptions& validate() const {
    if (every_n_steps && every_n_secs) {
      if (std::is_constant_evaluated()) throw "Can not provide both every_secs and every_steps: EvaluationOptions sets both every_n_steps and every_n_secs";
      throw std::invalid_argument(
          "Can not provide both every_secs and every_steps: EvaluationOptions sets both "
          "every_n_steps=" + std::to_string(*every_n_steps) + " and every_n_secs=" +
          detail::format_number(*every_n_secs) + "; set one.");
    }
    if (!every_n_steps && !every_n_secs) {
      if (std::is_constant_evaluated()) throw "Either every_secs or every_steps should be provided: set EvaluationOptions::every_n_steps or every_n_secs";
      throw std::invalid_argument(
          "Either every_secs or every_steps should be provided: set "
          "EvaluationOptions::every_n_steps or every_n_secs.");
    }
    if (every_n_steps && *every_n_steps < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: EvaluationOptions::every_n_steps must be at least 1";
      throw std::invalid_argument("runhooks: EvaluationOptions::every_n_steps must be at least 1, got " +
                                  std::to_string(*every_n_steps) + ".");
    }
    if (every_n_secs)
      detail::checked_secs("EvaluationOptions::every_n_secs", *every_n_secs, 0.0,
                           /*min_exclusive=*/true);
    return *this;
  }
};

namespace detail {
template <class Evaluator, class Backend, class Values>
concept evaluates_to = std::invocable<Evaluator&, Backend&> &&
                       std::same_as<std::remove_cvref_t<std::invoke_result_t<Evaluator&, Backend&>>,
                                    Values>;

template <class Evaluator, class Backend, class Values>
struct check_evaluator {
  static_assert(evaluates_to<Evaluator, Backend, Values>,
                "runhooks::EvaluationHook: the evaluator must be callable as `evaluator(backend)` "
                "and return runhooks::KeyValues<Keys...> of the hook's keys, in the hook's order "
                "(the evaluator, the backend and the values it must return are the template "
                "arguments of runhooks::detail::check_evaluator).");
  static constexpr bool value = true;
};
}  // namespace detail

// The values of one evaluation and the global step (or, without one, the run of the session)
// at which it ran.
template <KeyType... Ks>
struct Evaluation {
  KeyValues<Ks...> values;
  std::int64_t step;
};

template <class Evaluator, Clock C, KeyType... Ks>
class EvaluationHook;

// TensorFlow's InMemoryEvaluatorHook and Lightning's val_check_interval: calls
// `evaluator(backend)`, which returns runhooks::KeyValues<Ks...> (a TorchBackend's
// backend.evaluate(f) runs f under no_grad with the evaluation weights; the hook only calls the
// callable), on these occasions:
//   - at_start: in after_create_session, before the first step. A re-creation (a recovery)
//     evaluates again unless the global step it restored is the one last evaluated, so the
//     consumers' next values describe the restored model;
//   - when the trigger fires in after_run: TensorFlow's SecondOrStepTimer over the global step
//     after the step (the runs of this session without one), started at the creation's step,
//     so with every_n_steps = 250 from step 0 at steps 250, 500, ...; every_n_secs samples the
//     clock (detail::PeriodicTrigger), about 64 times per period;
//   - at_end: in after_run, on the step on which a hook declared before this one asked to stop
//     (StopAtStepHook, say), so the hooks after it see the final values; else in end(), unless
//     that step was evaluated already.
// Each evaluation is logged (`eval at step 500: val_loss = 0.25, val_accuracy = 0.9`), written
// as scalars under <output_dir>/eval with tag key_name<K>() (so a key named "loss" lands on the
// chart of the training loss, as TF Estimator's eval directory does), and kept (last()).
// An evaluation in after_run is also produced (ProducesKey): each key's value is what the hooks
// declared after this one that fetch it (EarlyStoppingHook<ValLoss>, ReduceLROnPlateauHook,
// BestCheckpointHook) receive at that same step; on the other steps they receive nothing, which
// they take as "no check this step". The evaluations at start and in end() produce nothing: no
// step follows them in which a hook could act on them.
// NaN and infinite metrics are logged and written as they are. An evaluator that throws
// propagates like any hook's exception (the session's recovery rules apply; nothing is logged
// or written for that evaluation).
// Per silent step: one compare of the step with the next that could trigger, and one test of the
// run's stop flag.
//
// Differs from TensorFlow: TensorFlow evaluates in end() even right after an evaluation, and
// counts local iterations where this hook counts global steps when the backend has one;
// TensorFlow's hook has no every_n_secs.
template <class Evaluator, Clock C, KeyType... Ks>
class EvaluationHook {
  static_assert(sizeof...(Ks) > 0,
                "runhooks::EvaluationHook needs at least one key: "
                "EvaluationHook{runhooks::keys<ValLoss>, evaluator, {.every_n_steps = 100}}");
  static_assert((std::is_arithmetic_v<typename Ks::value_type> && ...),
                "runhooks::EvaluationHook's metrics are numbers: each key's value_type must be "
                "arithmetic.");

 public:
  using values_type = KeyValues<Ks...>;

  EvaluationHook(Keys<Ks...>, Evaluator evaluator, EvaluationOptions options, C clock = {})
      : options_(options.validate()), evaluator_(std::move(evaluator)),
        eval_dir_(options_.output_dir.empty()
                      ? std::filesystem::path()
                      : std::filesystem::path(options_.output_dir) / "eval"),
        trigger_(options_.every_n_steps, options_.every_n_secs, std::move(clock)) {
    options_.output_dir = {};  // the hook keeps its own copy, eval_dir_
    (detail::check_summary_tag("EvaluationHook, a key's name", key_name<Ks>()), ...);
  }
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names EvaluationOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                EvaluationOptions, &EvaluationOptions::every_n_steps,
                &EvaluationOptions::every_n_secs, &EvaluationOptions::at_start,
                &EvaluationOptions::at_end, &EvaluationOptions::output_dir,
                &EvaluationOptions::log>>
  explicit EvaluationHook(...) = delete;  // Misspelt field? Write EvaluationOptions{...} to see which

  // A session begins: the event file's next write starts a session (SessionLog START), and the
  // previous session's last() is dropped, so that its first creation evaluates at start.
  void begin() {
    if (!eval_dir_.empty()) {
      if (!writer_) writer_ = EventFileWriterCache::get(eval_dir_);
      writer_->begin_session();
    }
    runs_ = 0;
    last_.reset();
    clear_produced();
  }

  template <class Backend>
  void after_create_session(Backend& backend) {
    static_assert(detail::check_evaluator<Evaluator, Backend, values_type>::value);
    const std::int64_t step = creation_step(backend);
    // The trigger starts at the creation's step, whether or not it evaluates there (a recovery
    // that restored an earlier step included).
    trigger_.recheck();
    if (options_.at_start && !(last_ && last_->step == step))
      evaluate(backend, step);
    else
      trigger_.fire(step);
  }

  // Per silent step: the step against the trigger's next check, and the run's stop flag.
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    std::int64_t step = 0;
    if constexpr (HasGlobalStep<Backend>)
      step = detail::global_step_of(run_context);
    else
      step = ++runs_;
    if (step >= trigger_.next_check() || stop_requested(run_context)) [[unlikely]]
      check(run_context.session(), step, stop_requested(run_context));
  }

  template <class Backend>
  void end(Backend& backend) {
    if (options_.at_end) {
      const std::int64_t step = creation_step(backend);
      if (!(last_ && last_->step == step)) evaluate(backend, step);
    }
    if (writer_) writer_->flush();
  }

  // The value of K produced in this step's after_run, or nothing (ProducesKey).
  template <KeyType K>
    requires(detail::contains<K, Ks...>)
  const std::optional<typename K::value_type>& produced(K) const noexcept {
    return boost::hana::at_c<detail::index_of<K, Ks...>>(produced_);
  }

  // The latest evaluation of this session (at start, on a trigger or at the end) and its step;
  // nothing before the first.
  const std::optional<Evaluation<Ks...>>& last() const noexcept { return last_; }
  // Evaluations since the hook was made.
  std::int64_t evaluations() const noexcept { return evaluations_; }
  // The options as given, but output_dir, which the hook does not keep (a view into the
  // caller's string): eval_dir() holds the directory.
  const EvaluationOptions& options() const noexcept { return options_; }
  // <output_dir>/eval, or empty without an output_dir.
  const std::filesystem::path& eval_dir() const noexcept { return eval_dir_; }
  C& clock() noexcept { return trigger_.clock(); }

 private:
  template <class Ctx>
  static bool stop_requested(Ctx& run_context) noexcept {
    if constexpr (requires { run_context.stop_requested(); })
      return run_context.stop_requested();
    else
      return false;
  }

  template <class Backend>
  std::int64_t creation_step(Backend& backend) const {
    if constexpr (HasGlobalStep<Backend>)
      return static_cast<std::int64_t>(backend.global_step());
    else
      return runs_;
  }

  // The rare path: values produced at the previous step cleared (produce() made this step take
  // it), then an evaluation if the trigger fires or a hook before this one asked to stop. Takes
  // values, not the run context, so that the context need not live in memory on other steps.
  template <class Backend>
  [[gnu::noinline]] void check(Backend& backend, std::int64_t step, bool stop) {
    if (produced_now_) clear_produced();
    if (trigger_.due(step) || (options_.at_end && stop)) {
      evaluate(backend, step);
      produce();
    }
  }

  template <class Backend>
  [[gnu::noinline]] void evaluate(Backend& backend, std::int64_t step) {
    static_assert(detail::check_evaluator<Evaluator, Backend, values_type>::value);
    if constexpr (detail::evaluates_to<Evaluator, Backend, values_type>) {
      last_.emplace(Evaluation<Ks...>{evaluator_(backend), step});
      ++evaluations_;
      trigger_.fire(step);
      if (options_.log) log(Severity::info, line(last_->values, step));
      if (!eval_dir_.empty()) write(last_->values, step);
    }
  }

  static std::string line(const values_type& values, std::int64_t step) {
    std::string text = "eval at step " + std::to_string(step) + ":";
    const char* separator = " ";
    values.for_each([&](std::string_view name, const auto& value) {
      text += separator;
      text.append(name);
      text += " = ";
      text += detail::format_number(static_cast<double>(value));
      separator = ", ";
    });
    return text;
  }

  void write(const values_type& values, std::int64_t step) {
    if (!writer_) {
      writer_ = EventFileWriterCache::get(eval_dir_);
      writer_->begin_session();
    }
    writer_->add_session_start(step);
    values.for_each([&](std::string_view name, const auto& value) {
      writer_->add_scalar(name, static_cast<float>(value), step);
    });
  }

  // The values stay produced for this step only: the next step takes the rare path, which
  // clears them (the trigger asks its timer again then, which refuses the step at once).
  void produce() {
    produce_each(std::index_sequence_for<Ks...>{});
    produced_now_ = true;
    trigger_.recheck();
  }
  template <std::size_t... I>
  void produce_each(std::index_sequence<I...>) {
    ((boost::hana::at_c<I>(produced_) = last_->values[Ks{}]), ...);
  }
  void clear_produced() noexcept {
    boost::hana::unpack(produced_, [](auto&... slot) { (slot.reset(), ...); });
    produced_now_ = false;
  }

  EvaluationOptions options_;
  [[no_unique_address]] Evaluator evaluator_;
  std::filesystem::path eval_dir_;
  detail::PeriodicTrigger<C> trigger_;
  std::shared_ptr<EventFileWriter> writer_;
  boost::hana::basic_tuple<std::optional<typename Ks::value_type>...> produced_{};
  bool produced_now_ = false;
  std::int64_t runs_ = 0;  // runs of this session, for a backend without a global step
  std::int64_t evaluations_ = 0;
  std::optional<Evaluation<Ks...>> last_{};
};

template <KeyType... Ks, class Evaluator>
  requires(!Clock<Evaluator>)
EvaluationHook(Keys<Ks...>, Evaluator, EvaluationOptions)
    -> EvaluationHook<Evaluator, SteadyClock, Ks...>;
template <KeyType... Ks, class Evaluator, Clock C>
EvaluationHook(Keys<Ks...>, Evaluator, EvaluationOptions, C) -> EvaluationHook<Evaluator, C, Ks...>;
// Arguments that fit no guide above (a misspelt option, most often) reach the catch-all
// constructor: a guide deduced from the leading keys and evaluator.
template <KeyType... Ks, class Evaluator>
EvaluationHook(Keys<Ks...>, Evaluator, ...) -> EvaluationHook<Evaluator, SteadyClock, Ks...>;

}  // namespace runhooks
