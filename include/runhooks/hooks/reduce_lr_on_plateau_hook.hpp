// ReduceLROnPlateauHook: lowers the backend's learning rate when a metric stops improving.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
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
#include <runhooks/hooks/learning_rate.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

struct ReduceLROnPlateauOptions {
  // Unset: the hook's mode tag (metric_mode.hpp), else the key's declared direction
  // (DeclaresDirection), else min; given beside a tag, it must agree with it.
  std::optional<MetricMode> mode{};
  // The new rate is the old one times this. At least 0 and below 1 (Keras rejects >= 1).
  double factor = 0.1;
  // Checks without improvement before a reduction. At least 0.
  std::int64_t patience = 10;
  // An improvement must beat the best by more than this. At least 0.
  double min_delta = 1e-4;
  // Checks after a reduction during which `wait` stays 0. At least 0.
  std::int64_t cooldown = 0;
  // The rate is never set below this, and not reduced once at or below float32(min_lr). At least 0.
  double min_lr = 0.0;
  // A check (Keras: the end of an epoch) every this many runs of the session. At least 1.
  std::int64_t every_n_iter = 1;

  // std::invalid_argument naming the option and value; a compile error when constexpr.
  constexpr const ReduceLROnPlateauOptions& validate() const {
    if (!(factor >= 0.0 && factor < 1.0)) {
      if (std::is_constant_evaluated()) throw "runhooks: ReduceLROnPlateauOptions::factor must be at least 0 and below 1";
      throw std::invalid_argument("runhooks: ReduceLROnPlateauOptions::factor must be at least 0 and below 1 "
                                  "(Keras: ReduceLROnPlateau does not support a factor >= 1.0), got " +
                                  detail::format_number(factor) + ".");
    }
    if (patience < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: ReduceLROnPlateauOptions::patience must be at least 0";
      throw std::invalid_argument("runhooks: ReduceLROnPlateauOptions::patience must be at least 0, got " +
                                  std::to_string(patience) + ".");
    }
    if (!(min_delta >= 0.0 && min_delta <= 1e300)) {
      if (std::is_constant_evaluated()) throw "runhooks: ReduceLROnPlateauOptions::min_delta must be a finite number at least 0";
      throw std::invalid_argument("runhooks: ReduceLROnPlateauOptions::min_delta must be a finite number at least 0, got " +
                                  detail::format_number(min_delta) + ".");
    }
    if (cooldown < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: ReduceLROnPlateauOptions::cooldown must be at least 0";
      throw std::invalid_argument("runhooks: ReduceLROnPlateauOptions::cooldown must be at least 0, got " +
                                  std::to_string(cooldown) + ".");
    }
    if (!(min_lr >= 0.0 && min_lr <= 1e300)) {
      if (std::is_constant_evaluated()) throw "runhooks: ReduceLROnPlateauOptions::min_lr must be a finite number at least 0";
      throw std::invalid_argument("runhooks: ReduceLROnPlateauOptions::min_lr must be a finite number at least 0, got " +
                                  detail::format_number(min_lr) + ".");
    }
    if (every_n_iter < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: ReduceLROnPlateauOptions::every_n_iter must be at least 1";
      throw std::invalid_argument("runhooks: ReduceLROnPlateauOptions::every_n_iter must be at least 1, got " +
                                  std::to_string(every_n_iter) + ".");
    }
    return *this;
  }
  // validate(), and the mode against the direction key K declares (a compile error when constexpr).
  template <KeyType K>
  constexpr const ReduceLROnPlateauOptions& validate_for() const {
    validate();
    detail::resolve_mode<K>(mode, "ReduceLROnPlateauOptions::mode");
    return *this;
  }
};

// What a resume needs to go on where the hook was (Keras loses it, keras#14862): a small value
// that a checkpoint can hold once hooks have state there (issue 27, item 9).
struct ReduceLROnPlateauState {
  double best;
  std::int64_t wait;
  std::int64_t cooldown_counter;
  std::int64_t checks;
};

// Keras' ReduceLROnPlateau on a key the backend computes or a hook declared before it produces (an
// EvaluationHook), through the backend's learning rate (HasLearningRate; a backend without it is a
// compile error naming it). Every every_n_iter runs the hook fetches MetricKey and makes one check,
// Keras' on_epoch_end, once the metric comes (a produced metric comes only on its producer's
// evaluation steps: a run without it is no check), exactly:
//   1. in cooldown (cooldown_counter > 0): cooldown_counter -= 1, wait = 0;
//   2. a value better than the best by more than min_delta becomes the best, wait = 0;
//   3. otherwise, out of cooldown: wait += 1, and once wait >= patience, if the rate is above
//      float32(min_lr), it becomes max(rate * factor, min_lr) and then cooldown_counter = cooldown,
//      wait = 0 (at or below float32(min_lr) nothing changes, and wait keeps growing, as in Keras).
// A reduction logs
//   ReduceLROnPlateauHook: reducing the learning rate to 0.01 at global step 1100 (val_loss did not
//   improve on 0.25 by more than 0.0001 in 10 checks).
// A NaN never improves, so it counts toward the patience; the best starts at +inf (min) or -inf
// (max), as EarlyStoppingHook's. begin() starts over. The metric is fetched only on the check runs:
// per silent step, one compare and one decrement.
//
// Differs from Keras (>= 3.7, whose best starts empty and takes the first value, NaN included):
// a first NaN, or +inf in mode min, is no best here, so it cannot block every later improvement.
// The rate is read and compared in double (Keras: a float32 variable read back as a Python float).
template <KeyType MetricKey, HookMode Mode = ModeFromOptions>
class ReduceLROnPlateauHook {
  static_assert(sizeof(detail::mode_check_t<MetricKey, Mode>) > 0);  // a tag against the key
  static_assert(std::is_arithmetic_v<typename MetricKey::value_type>,
                "runhooks::ReduceLROnPlateauHook watches a number: its key's value_type must be "
                "arithmetic.");

 public:
  explicit ReduceLROnPlateauHook(ReduceLROnPlateauOptions options = {})
      : options_(options.validate()),
        mode_(detail::resolve_mode<MetricKey, Mode>(options_.mode, "ReduceLROnPlateauOptions::mode")),
        runs_to_check_(options_.every_n_iter) {}
  // The mode in the type (metric_mode.hpp): `runhooks::ReduceLROnPlateauHook hook{runhooks::keys<Accuracy>,
  // runhooks::maximize, {...}}`. A key that declares the other direction is a compile error;
  // options.mode, if given, must agree with the tag (std::invalid_argument).
  ReduceLROnPlateauHook(Keys<MetricKey>, Mode, ReduceLROnPlateauOptions options = {})
    requires ModeTag<Mode>
      : ReduceLROnPlateauHook(options) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names ReduceLROnPlateauOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                ReduceLROnPlateauOptions, &ReduceLROnPlateauOptions::mode,
                &ReduceLROnPlateauOptions::factor, &ReduceLROnPlateauOptions::patience,
                &ReduceLROnPlateauOptions::min_delta, &ReduceLROnPlateauOptions::cooldown,
                &ReduceLROnPlateauOptions::min_lr, &ReduceLROnPlateauOptions::every_n_iter>>
  explicit ReduceLROnPlateauHook(...) = delete;  // Misspelt field? Write ReduceLROnPlateauOptions{...} to see which

  // Keras' on_train_begin (_reset).
  void begin() {
    best_ = worst();
    wait_ = 0;
    cooldown_counter_ = 0;
    checks_ = 0;
    reductions_ = 0;
    runs_to_check_ = options_.every_n_iter;
  }

  template <class Backend>
  void after_create_session(Backend&) {
    // The metric is the backend's or one a hook declared before this one produces (an
    // EvaluationHook): the session checks that one of them offers it, naming this hook.
    static_assert(detail::check_learning_rate<ReduceLROnPlateauHook, Backend>());
  }

  template <class Ctx>
  auto before_run(Ctx& run_context) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (active<Backend>)
      return SessionRunArgs{runhooks::fetch<MetricKey>(--runs_to_check_ <= 0)};
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (active<Backend>) {
      if (const auto& value = run_values[MetricKey{}]; value.has_value()) [[unlikely]] {
        std::int64_t step = checks_ + 1;
        if constexpr (requires { run_context.global_step(); }) step = run_context.global_step();
        check(static_cast<double>(*value), step, run_context.session());
      }
    }
  }

  const ReduceLROnPlateauOptions& options() const noexcept { return options_; }
  MetricMode mode() const noexcept { return mode_; }
  // Keras' state: the best value (empty while nothing improved on the starting +-inf), wait, the
  // cooldown counter; the checks since begin() and the reductions made.
  std::optional<double> best() const noexcept {
    return best_ == worst() ? std::nullopt : std::optional<double>(best_);
  }
  std::int64_t wait() const noexcept { return wait_; }
  std::int64_t cooldown_counter() const noexcept { return cooldown_counter_; }
  std::int64_t checks() const noexcept { return checks_; }
  std::int64_t reductions() const noexcept { return reductions_; }

  // The state a resume needs, and its restoration (after begin(), which starts over); a
  // checkpoint carries it under state_name() (StatefulHook, hook_state.hpp).
  static std::string state_name() {
    return "ReduceLROnPlateauHook<" + std::string(key_name<MetricKey>()) + ">";
  }
  ReduceLROnPlateauState state() const noexcept { return {best_, wait_, cooldown_counter_, checks_}; }
  void restore(const ReduceLROnPlateauState& state) {
    if (state.wait < 0 || state.cooldown_counter < 0 || state.checks < 0 || std::isnan(state.best))
      throw std::invalid_argument("runhooks: ReduceLROnPlateauHook::restore: a saved state with a "
                                  "negative count or a NaN best is not one this hook wrote.");
    best_ = state.best;
    wait_ = state.wait;
    cooldown_counter_ = state.cooldown_counter;
    checks_ = state.checks;
  }

 private:
  template <class Backend>
  static constexpr bool active = HasLearningRate<Backend>;

  double worst() const noexcept {
    return mode_ == MetricMode::min ? std::numeric_limits<double>::infinity()
                                            : -std::numeric_limits<double>::infinity();
  }
  // False whenever value is NaN.
  bool improves(double value, double reference) const noexcept {
    return mode_ == MetricMode::min ? value + options_.min_delta < reference
                                            : value - options_.min_delta > reference;
  }

  template <class Backend>
  [[gnu::noinline]] void check(double value, std::int64_t step, Backend& backend) {
    runs_to_check_ = options_.every_n_iter;
    ++checks_;
    if (cooldown_counter_ > 0) {
      --cooldown_counter_;
      wait_ = 0;
    }
    if (improves(value, best_)) {
      best_ = value;
      wait_ = 0;
      return;
    }
    if (cooldown_counter_ > 0) return;
    if (++wait_ < options_.patience) return;
    const double old_rate = static_cast<double>(backend.learning_rate());
    // Keras: old_lr > np.float32(min_lr), so a rate stored in float32 stops at min_lr.
    if (!(old_rate > static_cast<double>(static_cast<float>(options_.min_lr)))) return;
    const double new_rate = std::max(old_rate * options_.factor, options_.min_lr);
    backend.set_learning_rate(new_rate);
    ++reductions_;
    log(Severity::info, "ReduceLROnPlateauHook: reducing the learning rate to " +
                            detail::format_number(new_rate) + " at global step " +
                            std::to_string(step) + " (" + std::string(key_name<MetricKey>()) +
                            " did not improve" +
                            (best_ == worst() ? std::string()
                                              : " on " + detail::format_number(best_)) +
                            " by more than " + detail::format_number(options_.min_delta) +
                            " in " + std::to_string(wait_) + " checks).");
    cooldown_counter_ = options_.cooldown;
    wait_ = 0;
  }

  ReduceLROnPlateauOptions options_;
  MetricMode mode_;  // the tag's, else the options' mode, else the key's direction, else min
  std::int64_t runs_to_check_;
  double best_ = worst();
  std::int64_t wait_ = 0;
  std::int64_t cooldown_counter_ = 0;
  std::int64_t checks_ = 0;
  std::int64_t reductions_ = 0;
};

// The tag constructor deduces the hook type; this guide does too for braced options with a
// misspelt field, so that the catch-all constructor names the options type and its fields.
template <KeyType K, MetricMode M>
ReduceLROnPlateauHook(Keys<K>, MetricModeTag<M>, ...) -> ReduceLROnPlateauHook<K, MetricModeTag<M>>;

}  // namespace runhooks
