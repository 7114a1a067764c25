// EarlyStoppingHook: requests a stop once a metric has stopped improving.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/hooks/metric_mode.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

// Why an EarlyStoppingHook asked to stop: Lightning's EarlyStoppingReason.
enum class EarlyStoppingReason {
  not_stopped,
  stopping_threshold,    // the value was better than stopping_threshold
  divergence_threshold,  // the value was worse than divergence_threshold
  patience_exhausted,    // patience checks without improvement
  non_finite_metric,     // NaN or +-inf, with check_finite
};

struct EarlyStoppingOptions {
  // Unset: the hook's mode tag (metric_mode.hpp), else the key's declared direction
  // (DeclaresDirection), else min; given beside a tag, it must agree with it.
  std::optional<MetricMode> mode{};
  // An improvement must beat the best value by more than this (Keras: |min_delta|). At least 0.
  double min_delta = 0.0;
  // Checks without improvement before the stop. At least 0.
  std::int64_t patience = 0;
  // A value the metric must beat before the patience counter restarts (Keras' baseline).
  std::optional<double> baseline{};
  // A check (Keras: the end of an epoch) every this many runs of the session. At least 1.
  std::int64_t every_n_iter = 1;
  // Checks before this one are skipped (Keras' start_from_epoch). At least 0.
  std::int64_t start_from_check = 0;
  // Lightning's: stop at once on a value better than this (strictly: < in mode min). Finite.
  std::optional<double> stopping_threshold{};
  // Lightning's: stop at once on a value worse than this (strictly: > in mode min). Finite.
  std::optional<double> divergence_threshold{};
  // Lightning's (default true there; false here, as in Keras and TensorFlow): stop at once on a
  // NaN or +-inf value. Off, a NaN counts toward the patience like any value that does not improve.
  bool check_finite = false;
  // TensorFlow's stop_if_no_decrease_hook(min_steps): a check at a global step below this (the
  // check's index without a global step) is skipped whole, so the hook never stops before it.
  // At least 0.
  std::int64_t min_steps = 0;

  // std::invalid_argument naming the option and value; a compile error when constexpr.
  constexpr const EarlyStoppingOptions& validate() const {
    if (!(min_delta >= 0.0 && min_delta <= 1e300)) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::min_delta must be a number at least 0";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::min_delta must be a finite number at least 0, got " +
                                  detail::format_number(min_delta) + ".");
    }
    if (patience < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::patience must be at least 0";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::patience must be at least 0, got " +
                                  std::to_string(patience) + ".");
    }
    if (baseline && !std::isfinite(*baseline)) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::baseline must be finite";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::baseline must be finite, got " +
                                  detail::format_number(*baseline) + ".");
    }
    if (every_n_iter < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::every_n_iter must be at least 1";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::every_n_iter must be at least 1, got " +
                                  std::to_string(every_n_iter) + ".");
    }
    if (start_from_check < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::start_from_check must be at least 0";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::start_from_check must be at least 0, got " +
                                  std::to_string(start_from_check) + ".");
    }
    if (stopping_threshold && !std::isfinite(*stopping_threshold)) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::stopping_threshold must be finite";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::stopping_threshold must be finite, got " +
                                  detail::format_number(*stopping_threshold) + ".");
    }
    if (divergence_threshold && !std::isfinite(*divergence_threshold)) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::divergence_threshold must be finite";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::divergence_threshold must be finite, got " +
                                  detail::format_number(*divergence_threshold) + ".");
    }
    if (min_steps < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: EarlyStoppingOptions::min_steps must be at least 0";
      throw std::invalid_argument("runhooks: EarlyStoppingOptions::min_steps must be at least 0, got " +
                                  std::to_string(min_steps) + ".");
    }
    return *this;
  }
  // validate(), and the mode against the direction key K declares (a compile error when constexpr).
  template <KeyType K>
  constexpr const EarlyStoppingOptions& validate_for() const {
    validate();
    detail::resolve_mode<K>(mode, "EarlyStoppingOptions::mode");
    return *this;
  }
};

// What a resume needs to go on where the hook was (Lightning saves wait, best and the reason;
// Keras nothing): a small value that a checkpoint can hold once hooks have state there (issue 27,
// item 9). best_step < 0: no best yet.
struct EarlyStoppingState {
  double best;
  std::int64_t best_step;
  std::int64_t wait;
  std::int64_t checks;
};

// Keras' EarlyStopping on a key the backend computes or a hook declared before it produces (an
// EvaluationHook's validation loss, accuracy). Every every_n_iter runs the hook fetches MetricKey
// and makes one check, Keras' on_epoch_end, once the metric comes (a produced metric comes only
// on its producer's evaluation steps: a fetch due on another step waits for the next one): the
// counter `wait` goes up by one; a value that improves on the best so far (by more than
// min_delta: value + min_delta < best in min mode, value - min_delta > best in max mode; the
// best starts at +inf in min mode and -inf in max mode, as in Keras) becomes the best, and
// restarts `wait` if there is no baseline or the value also improves on it; otherwise, once
// wait >= patience and this is not the first check, the hook requests a stop (a clean end:
// every end() runs) and logs why:
//   EarlyStoppingHook: stopping at global step 1200: val_loss did not improve on its best
//   (0.25 at global step 900) by more than 0.001 in 3 checks (patience 3).
// A NaN never improves (Keras: ops.less(nan, best) is false): it counts toward the patience like
// any value that does not improve, so a first NaN cannot become a best that nothing beats, and
// a metric that is NaN at every check stops the run after `patience` checks (at the second
// check at the earliest), saying so:
//   EarlyStoppingHook: stopping at global step 3: val_loss was NaN or +inf at each of its 3
//   checks (patience 3), so it has no best.
// Lightning's checks come first, in Lightning's order, each stopping at once (the best and
// `wait` untouched): with check_finite, a NaN or +-inf value (reason non_finite_metric); a value
// better than stopping_threshold; a value worse than divergence_threshold. Then Keras' patience
// test above (reason patience_exhausted). A check before start_from_check, or at a global step
// below min_steps, is skipped whole. stop_reason() and stop_message() tell why it stopped.
// begin() starts over. The metric is fetched only on the check runs (runhooks::fetch<K>(false)
// otherwise): per silent step, one compare and one decrement.
//
// Differs from Keras: checks are counted in runs of the session, not epochs; there is no
// restore_best_weights (the backend owns its state: save it from a hook, or see the checkpoint
// hooks) and no mode "auto"; min_delta must be at least 0 (Keras takes its absolute value).
// Differs from Lightning: check_finite is false by default; with patience 0 the first check never
// stops on patience (Keras' rule), where Lightning stops on a first NaN or +inf (min mode).
// TensorFlow's estimator hook stop_if_no_decrease_hook is the min mode with patience counted in
// global steps: patience = its max_steps_without_decrease / every_n_iter.
template <KeyType MetricKey, HookMode Mode = ModeFromOptions>
class EarlyStoppingHook {
  static_assert(sizeof(detail::mode_check_t<MetricKey, Mode>) > 0);  // a tag against the key
  static_assert(std::is_arithmetic_v<typename MetricKey::value_type>,
                "runhooks::EarlyStoppingHook watches a number: its key's value_type must be "
                "arithmetic.");

 public:
  explicit EarlyStoppingHook(EarlyStoppingOptions options = {})
      : options_(options.validate()),
        mode_(detail::resolve_mode<MetricKey, Mode>(options_.mode, "EarlyStoppingOptions::mode")),
        runs_to_check_(options_.every_n_iter) {}
  // The mode in the type (metric_mode.hpp): `runhooks::EarlyStoppingHook hook{runhooks::keys<Accuracy>,
  // runhooks::maximize, {...}}`. A key that declares the other direction is a compile error;
  // options.mode, if given, must agree with the tag (std::invalid_argument).
  EarlyStoppingHook(Keys<MetricKey>, Mode, EarlyStoppingOptions options = {})
    requires ModeTag<Mode>
      : EarlyStoppingHook(options) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names EarlyStoppingOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                EarlyStoppingOptions, &EarlyStoppingOptions::mode, &EarlyStoppingOptions::min_delta,
                &EarlyStoppingOptions::patience, &EarlyStoppingOptions::baseline,
                &EarlyStoppingOptions::every_n_iter, &EarlyStoppingOptions::start_from_check,
                &EarlyStoppingOptions::stopping_threshold,
                &EarlyStoppingOptions::divergence_threshold, &EarlyStoppingOptions::check_finite,
                &EarlyStoppingOptions::min_steps>>
  explicit EarlyStoppingHook(...) = delete;  // Misspelt field? Write EarlyStoppingOptions{...} to see which

  // Keras' on_train_begin.
  void begin() {
    wait_ = 0;
    checks_ = 0;
    best_ = worst();
    best_step_.reset();
    stopped_step_.reset();
    reason_ = EarlyStoppingReason::not_stopped;
    message_.clear();
    runs_to_check_ = options_.every_n_iter;
  }

  // The metric is the backend's or one a hook declared before this one produces (an
  // EvaluationHook); the session checks that one of them offers it, naming this hook.
  template <class Ctx>
  auto before_run(Ctx&) {
    // The count of runs goes down here, where the test that follows can use the flags of the
    // subtraction; after_run tests only whether the metric came.
    return SessionRunArgs{runhooks::fetch<MetricKey>(--runs_to_check_ <= 0)};
  }

  // A run whose metric did not come (a producer that did not evaluate at this step) is no check.
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    if (const auto& value = run_values[MetricKey{}]; value.has_value()) [[unlikely]] {
      std::int64_t step = checks_;
      if constexpr (requires { run_context.global_step(); }) step = run_context.global_step();
      if (check(static_cast<double>(*value), step)) run_context.request_stop();
    }
  }

  const EarlyStoppingOptions& options() const noexcept { return options_; }
  // The mode in use: the tag's, else the options', else the key's declared direction, else min.
  MetricMode mode() const noexcept { return mode_; }
  // Keras' state: the best value so far (empty while no checked value has improved on the
  // starting +-inf: none checked yet, or each was NaN or the wrong infinity), `wait`, and the
  // checks made since begin().
  std::optional<double> best() const noexcept {
    return best_step_ ? std::optional<double>(best_) : std::nullopt;
  }
  std::optional<std::int64_t> best_step() const noexcept { return best_step_; }
  std::int64_t wait() const noexcept { return wait_; }
  std::int64_t checks() const noexcept { return checks_; }
  // The global step (or, without one, the check) at which the hook asked to stop.
  std::optional<std::int64_t> stopped_step() const noexcept { return stopped_step_; }
  // Why it asked to stop (not_stopped until it does), and the line it logged then (empty before).
  EarlyStoppingReason stop_reason() const noexcept { return reason_; }
  const std::string& stop_message() const noexcept { return message_; }

  // The state a resume needs, and its restoration after begin() (which starts over); a
  // checkpoint carries it under state_name() (StatefulHook, hook_state.hpp).
  static std::string state_name() { return "EarlyStoppingHook<" + std::string(key_name<MetricKey>()) + ">"; }
  EarlyStoppingState state() const noexcept {
    return {best_step_ ? best_ : 0.0, best_step_.value_or(-1), wait_, checks_};
  }
  void restore(const EarlyStoppingState& state) {
    if (state.wait < 0 || state.checks < 0 || (state.best_step >= 0 && std::isnan(state.best)))
      throw std::invalid_argument("runhooks: EarlyStoppingHook::restore: a saved state with a "
                                  "negative count or a NaN best is not one this hook wrote.");
    best_ = state.best_step >= 0 ? state.best : worst();
    best_step_ = state.best_step >= 0 ? std::optional(state.best_step) : std::nullopt;
    wait_ = state.wait;
    checks_ = state.checks;
  }

 private:
  // Keras' starting best: every finite value improves on it.
  double worst() const noexcept {
    return mode_ == MetricMode::min ? std::numeric_limits<double>::infinity()
                                            : -std::numeric_limits<double>::infinity();
  }

  // False whenever value is NaN.
  bool improves(double value, double reference) const noexcept {
    return mode_ == MetricMode::min ? value + options_.min_delta < reference
                                            : value - options_.min_delta > reference;
  }

  // Keras' on_epoch_end; true: stop. Takes values, not the run context, so that the context
  // need not live in memory on the steps that do not check.
  [[gnu::noinline]] bool check(double value, std::int64_t step) {
    runs_to_check_ = options_.every_n_iter;
    const std::int64_t check_index = checks_++;
    if (check_index < options_.start_from_check || step < options_.min_steps) return false;
    // Lightning's order: non-finite, stopping threshold, divergence threshold, then patience.
    if (options_.check_finite && !std::isfinite(value))
      return stop(step, EarlyStoppingReason::non_finite_metric, value);
    if (options_.stopping_threshold && improves_strictly(value, *options_.stopping_threshold))
      return stop(step, EarlyStoppingReason::stopping_threshold, value);
    if (options_.divergence_threshold && improves_strictly(*options_.divergence_threshold, value))
      return stop(step, EarlyStoppingReason::divergence_threshold, value);
    ++wait_;
    if (improves(value, best_)) {
      best_ = value;
      best_step_ = step;
      if (!options_.baseline || improves(value, *options_.baseline)) wait_ = 0;
      return false;
    }
    if (wait_ >= options_.patience && check_index > 0)
      return stop(step, EarlyStoppingReason::patience_exhausted, value);
    return false;
  }

  // Lightning's monitor_op: value < reference in mode min (> in max), with no min_delta.
  bool improves_strictly(double value, double reference) const noexcept {
    return mode_ == MetricMode::min ? value < reference : value > reference;
  }

  bool stop(std::int64_t step, EarlyStoppingReason why, double value) {
    stopped_step_ = step;
    reason_ = why;
    message_ = why == EarlyStoppingReason::patience_exhausted ? reason(step)
                                                              : threshold_reason(step, why, value);
    log(Severity::info, message_);
    return true;
  }

  std::string threshold_reason(std::int64_t step, EarlyStoppingReason why, double value) const {
    const char* better = mode_ == MetricMode::min ? "<" : ">";
    const char* worse = mode_ == MetricMode::min ? ">" : "<";
    std::string line = "EarlyStoppingHook: stopping at global step " + std::to_string(step) +
                       ": " + std::string(key_name<MetricKey>()) + " = " +
                       detail::format_number(value);
    if (why == EarlyStoppingReason::non_finite_metric) {
      line += " is not finite (check_finite); its best was ";
      line += best_step_ ? detail::format_number(best_) + " at global step " +
                               std::to_string(*best_step_) + "."
                         : std::string("none yet.");
    } else if (why == EarlyStoppingReason::stopping_threshold) {
      line += std::string(" reached the stopping_threshold (") + better + " " +
              detail::format_number(*options_.stopping_threshold) + ").";
    } else {
      line += std::string(" passed the divergence_threshold (") + worse + " " +
              detail::format_number(*options_.divergence_threshold) + ").";
    }
    return line;
  }

  std::string reason(std::int64_t step) const {
    const std::string name(key_name<MetricKey>());
    std::string line = "EarlyStoppingHook: stopping at global step " + std::to_string(step) +
                       ": " + name;
    if (!best_step_) {
      // Nothing improved on the starting +-inf, which is no value of the metric to report.
      line += std::string(" was NaN or ") + (mode_ == MetricMode::min ? "+inf" : "-inf") +
              " at each of its " + std::to_string(wait_) + " checks (patience " +
              std::to_string(options_.patience) + "), so it has no best.";
      return line;
    }
    line += " did not improve on its best (" + detail::format_number(best_) +
            " at global step " + std::to_string(*best_step_) + ")";
    if (options_.baseline && !improves(best_, *options_.baseline))
      line += " nor on the baseline " + detail::format_number(*options_.baseline);
    line += " by more than " + detail::format_number(options_.min_delta) + " in " +
            std::to_string(wait_) + " checks (patience " + std::to_string(options_.patience) +
            ").";
    return line;
  }

  EarlyStoppingOptions options_;
  MetricMode mode_;  // the tag's, else the options' mode, else the key's direction, else min
  std::int64_t runs_to_check_;
  std::int64_t wait_ = 0;
  std::int64_t checks_ = 0;
  double best_ = worst();
  std::optional<std::int64_t> best_step_{};
  std::optional<std::int64_t> stopped_step_{};
  EarlyStoppingReason reason_ = EarlyStoppingReason::not_stopped;
  std::string message_;
};

// The tag constructor deduces the hook type; this guide does too for braced options with a
// misspelt field, so that the catch-all constructor names the options type and its fields.
template <KeyType K, MetricMode M>
EarlyStoppingHook(Keys<K>, MetricModeTag<M>, ...) -> EarlyStoppingHook<K, MetricModeTag<M>>;

}  // namespace runhooks
