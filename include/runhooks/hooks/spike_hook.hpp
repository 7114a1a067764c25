// SpikeHook: stops training, or rolls it back to the latest checkpoint, on a loss spike, by
// Lightning's SpikeDetection rule.
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
#include <utility>
#include <vector>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>  // MetricMode
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session/rollback.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

// Lightning's TrainingSpikeException.
class TrainingSpikeError : public Error {
 public:
  explicit TrainingSpikeError(std::int64_t step)
      : Error("Training spike detected at global step " + std::to_string(step)) {}
};

// What SpikeHook does on a spike: throw TrainingSpikeError as Lightning does (the run ends
// without end(), so no final checkpoint of weights the spike may have spoiled), request a clean
// stop, or roll back to the latest checkpoint (runhooks; at most SpikeOptions::max_rollbacks
// times, then SpikeOptions::after_rollbacks).
enum class SpikeAction { raise, stop, rollback };

struct SpikeOptions {
  MetricMode mode = MetricMode::min;
  // The running mean is over the last this many values that were not spikes. At least 1.
  std::int64_t window = 10;
  // Checks before this one never spike (Lightning's batch_idx >= warmup). At least 0.
  std::int64_t warmup = 1;
  // A spike differs from the running mean by at least |atol| (unset: no such test). Finite.
  std::optional<double> atol{};
  // ... and by at least |rtol * mean| (unset: no such test). Finite.
  std::optional<double> rtol = 2.0;
  // A NaN or +-inf value is a spike (Lightning's finite_only=True; its docstring says the opposite,
  // its code does this).
  bool finite_only = true;
  SpikeAction on_spike = SpikeAction::raise;
  // With on_spike = rollback: how many rollbacks the hook asks for at most (entrenar's 3), over
  // the hook's life and the resumes of its checkpoints; a spike after that does what
  // after_rollbacks says (raise or stop). At least 1.
  std::int64_t max_rollbacks = 3;
  SpikeAction after_rollbacks = SpikeAction::raise;

  const SpikeOptions& validate() const {
    if (window < 1)
      throw std::invalid_argument("runhooks: SpikeOptions::window must be at least 1, got " +
                                  std::to_string(window) + ".");
    if (warmup < 0)
      throw std::invalid_argument("runhooks: SpikeOptions::warmup must be at least 0, got " +
                                  std::to_string(warmup) + ".");
    if (atol && !std::isfinite(*atol))
      throw std::invalid_argument("runhooks: SpikeOptions::atol must be finite, got " +
                                  detail::format_number(*atol) + ".");
    if (rtol && !std::isfinite(*rtol))
      throw std::invalid_argument("runhooks: SpikeOptions::rtol must be finite, got " +
                                  detail::format_number(*rtol) + ".");
    if (on_spike != SpikeAction::raise && on_spike != SpikeAction::stop &&
        on_spike != SpikeAction::rollback)
      throw std::invalid_argument("runhooks: SpikeOptions::on_spike must be raise, stop or "
                                  "rollback, got " +
                                  std::to_string(static_cast<int>(on_spike)) + ".");
    if (max_rollbacks < 1)
      throw std::invalid_argument("runhooks: SpikeOptions::max_rollbacks must be at least 1, got " +
                                  std::to_string(max_rollbacks) + ".");
    if (after_rollbacks != SpikeAction::raise && after_rollbacks != SpikeAction::stop)
      throw std::invalid_argument(
          "runhooks: SpikeOptions::after_rollbacks must be raise or stop, got " +
          std::string(after_rollbacks == SpikeAction::rollback
                          ? "rollback"
                          : std::to_string(static_cast<int>(after_rollbacks))) +
          ".");
    return *this;
  }
};

// Lightning's spike rule (lightning/fabric/utilities/spike.py), on values fed one at a time.
// observe(x) at check index i (from 0): a spike when i >= warmup and either x is not finite
// (finite_only), or x is not better than the last value kept (min: x - last > 0; the last starts at
// 0) and |x - mean| >= |atol| (if set) and |x - mean| >= |rtol * mean| (if set), mean being the
// running mean of the last `window` values kept (NaN before the first, so nothing but a non-finite
// value spikes then). A value that is no spike and is finite is kept.
// Differs from Lightning: a non-finite value during the warmup is not kept (Lightning adds it to
// its mean when finite_only is set, which then disables the detector for `window` values).
class SpikeDetector {
 public:
  explicit SpikeDetector(const SpikeOptions& options)
      : options_(options.validate()), values_(static_cast<std::size_t>(options.window), 0.0) {}

  // Whether x, the value at check `index`, is a spike; keeps it in the mean if it is not.
  bool observe(double x, std::int64_t index) {
    const bool spike = index >= options_.warmup && is_spike(x);
    if (!spike && std::isfinite(x)) keep(x);
    return spike;
  }
  // The running mean (NaN before any value was kept), and the last value kept (0 before).
  double mean() const noexcept {
    if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
    double sum = 0.0;
    const std::size_t n = count_ < values_.size() ? count_ : values_.size();
    for (std::size_t i = 0; i < n; ++i) sum += values_[i];
    return sum / static_cast<double>(n);
  }
  double last() const noexcept { return last_; }
  void reset() noexcept {
    count_ = 0;
    last_ = 0.0;
  }

  // The values kept so far (their count), and the mean's values as its ring holds them (the
  // first min(kept, window)): with last(), what restore() takes back.
  std::int64_t kept() const noexcept { return static_cast<std::int64_t>(count_); }
  std::vector<double> window_values() const {
    return {values_.begin(), values_.begin() + static_cast<std::ptrdiff_t>(held())};
  }
  // Throws std::invalid_argument for values this detector's options could not have kept.
  void restore(std::int64_t kept, double last, const std::vector<double>& values) {
    const std::size_t window = values_.size();
    const auto finite = [](double v) { return std::isfinite(v); };
    const bool fits =
        kept >= 0 &&
        values.size() == std::min<std::size_t>(static_cast<std::size_t>(kept), window) &&
        std::isfinite(last) && (kept > 0 || last == 0.0) &&
        std::all_of(values.begin(), values.end(), finite);
    if (!fits)
      throw std::invalid_argument(
          "SpikeDetector: the saved running mean (" + std::to_string(kept) + " values kept, " +
          std::to_string(values.size()) + " in the window) does not fit a window of " +
          std::to_string(window) + " (SpikeOptions::window changed?), or holds a value that is "
          "not finite");
    std::copy(values.begin(), values.end(), values_.begin());
    count_ = static_cast<std::size_t>(kept);
    last_ = last;
  }

 private:
  std::size_t held() const noexcept { return count_ < values_.size() ? count_ : values_.size(); }

  bool is_spike(double x) const {
    const double running = mean();
    if (options_.finite_only && !std::isfinite(x)) return true;
    const double diff = x - last_;
    if (options_.mode == MetricMode::min ? diff <= 0.0 : diff >= 0.0) return false;
    const double distance = std::fabs(x - running);
    const bool far_abs = !options_.atol || distance >= std::fabs(*options_.atol);
    const bool far_rel = !options_.rtol || distance >= std::fabs(*options_.rtol * running);
    return far_abs && far_rel;
  }
  void keep(double x) {
    values_[count_ % values_.size()] = x;
    ++count_;
    last_ = x;
  }

  SpikeOptions options_;
  std::vector<double> values_;
  std::size_t count_ = 0;
  double last_ = 0.0;
};

// What a checkpoint carries of a SpikeHook (StatefulHook, hook_state.hpp): the checks since the
// first session began, the running mean's values (SpikeDetector::kept(), last(),
// window_values()) and the rollbacks asked for (Lightning saves the running mean and the bad
// batches; the bad steps stay in memory here).
struct SpikeState {
  std::int64_t checks;
  std::int64_t kept;
  double last;
  std::vector<double> window;
  std::int64_t rollbacks;
};

// Lightning's SpikeDetection on a loss the backend computes: fetches LossKey after every run (as
// Lightning checks every batch, and as NanTensorHook does), counts its checks from 0 since begin(),
// and on a spike records the global steps [step - 1, step] in bad_steps() (Lightning's
// bad_batches: the previous step may have spoiled the weights), logs
//   SpikeHook: loss spike at global step 12: loss = 3.5, running mean 1 (rtol 2); steps 11 and
//   12 recorded as bad.
// and then, as on_spike says:
//   raise     throws TrainingSpikeError (Lightning's);
//   stop      requests a clean stop (every end() runs: the final checkpoint is written);
//   rollback  throws RollbackRequest (session/rollback.hpp): a recoverable session whose creator
//             restores checkpoints goes back to the latest one, at once, and runs the step again
//             on it; the hook's state comes back with it (the running mean of those steps), but
//             not its count of rollbacks, which only grows. The line then ends "Rolling back to
//             the latest checkpoint (rollback 1 of 3)." After max_rollbacks rollbacks a spike
//             does what after_rollbacks says. With no checkpoint yet the session raises
//             RollbackError and stops; a session that does not recover raises the
//             RollbackRequest (an AbortedError). A deterministic backend replays the same data
//             and spikes again: a rollback helps where the run is not deterministic, or where
//             the backend skips the bad steps on its own.
// Per step: the fetch (shared with any other reader of the key) and the test, a sum over `window`
// values. Its state is in the checkpoint (SpikeState): declare it before the CheckpointSaverHook.
// Many processes: each rank tests its own loss; Lightning stops every rank when any spikes: wrap
// the hook in Voted (MpiVoted) with on_spike = stop, and every rank stops after the same vote
// step (docs/distributed.md). raise ends the job (the vote's abandon()); rollback is for one
// process (a job of many processes does not re-create one rank's backend: ChiefStateHook), and
// Voted refuses it when made (std::invalid_argument).
template <KeyType LossKey>
class SpikeHook {
  static_assert(std::is_arithmetic_v<typename LossKey::value_type>,
                "runhooks::SpikeHook watches a number: its key's value_type must be arithmetic.");

 public:
  explicit SpikeHook(SpikeOptions options = {})
      : options_(options.validate()), detector_(options_) {}
  template <class Hint = detail::write_the_options_type<
                SpikeOptions, &SpikeOptions::mode, &SpikeOptions::window, &SpikeOptions::warmup,
                &SpikeOptions::atol, &SpikeOptions::rtol, &SpikeOptions::finite_only,
                &SpikeOptions::on_spike, &SpikeOptions::max_rollbacks,
                &SpikeOptions::after_rollbacks>>
  explicit SpikeHook(...) = delete;  // Misspelt field? Write SpikeOptions{...} to see which

  // A new session starts a new running mean; the rollbacks asked for stay counted.
  void begin() {
    detector_.reset();
    checks_ = 0;
  }

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(detail::check_hook_keys<SpikeHook, Backend, LossKey>());
  }

  template <class Ctx>
  auto before_run(Ctx& run_context) const {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (detail::fetches_all<Backend, LossKey>)
      return SessionRunArgs{runhooks::fetch<LossKey>()};
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (detail::fetches_all<Backend, LossKey>) {
      const auto& loss = run_values[LossKey{}];
      if (!loss) return;
      const double x = static_cast<double>(*loss);
      if (detector_.observe(x, checks_++)) [[unlikely]] {
        std::int64_t step = checks_;
        if constexpr (requires { run_context.global_step(); }) step = run_context.global_step();
        if (spiked(x, step)) run_context.request_stop();
      }
    }
  }

  const SpikeOptions& options() const noexcept { return options_; }
  const SpikeDetector& detector() const noexcept { return detector_; }
  // Lightning's bad_batches, in global steps: two per spike (kept across rollbacks).
  const std::vector<std::int64_t>& bad_steps() const noexcept { return bad_steps_; }
  // The rollbacks asked for (on_spike = rollback).
  std::int64_t rollbacks() const noexcept { return rollbacks_; }

  // Called by Voted (MpiVoted) when it wraps the hook: a rollback would be one rank's alone.
  void voted() const {
    if (options_.on_spike == SpikeAction::rollback)
      throw std::invalid_argument(
          "runhooks: SpikeHook in Voted (MpiVoted): SpikeOptions::on_spike = rollback would roll "
          "back one rank alone, and a job of many processes does not re-create one rank's "
          "backend; use SpikeAction::stop (every rank stops at the same step; rerun the job to "
          "resume from the chief's checkpoint).");
  }

  // A checkpoint carries the state under state_name() (StatefulHook, hook_state.hpp).
  static std::string state_name() { return "SpikeHook<" + std::string(key_name<LossKey>()) + ">"; }
  SpikeState state() const {
    return {checks_, detector_.kept(), detector_.last(), detector_.window_values(), rollbacks_};
  }
  // After begin(), before after_create_session() (the session does it on start and on every
  // recovery). The count of rollbacks never goes down: a rollback restores the state saved
  // before it, and must not forget that it happened.
  void restore(const SpikeState& state) {
    if (state.checks < 0 || state.kept < 0 || state.kept > state.checks || state.rollbacks < 0)
      throw std::invalid_argument("SpikeHook::restore: the saved counts (checks " +
                                  std::to_string(state.checks) + ", kept " +
                                  std::to_string(state.kept) + ", rollbacks " +
                                  std::to_string(state.rollbacks) + ") cannot be a SpikeHook's");
    detector_.restore(state.kept, state.last, state.window);
    checks_ = state.checks;
    rollbacks_ = std::max(rollbacks_, state.rollbacks);
  }

 private:
  // Throws, or returns true: stop.
  [[gnu::noinline]] bool spiked(double x, std::int64_t step) {
    bad_steps_.push_back(step - 1);
    bad_steps_.push_back(step);
    std::string line = "SpikeHook: loss spike at global step " + std::to_string(step) + ": " +
                       std::string(key_name<LossKey>()) + " = " + detail::format_number(x) +
                       ", running mean " + detail::format_number(detector_.mean());
    if (options_.rtol) line += " (rtol " + detail::format_number(*options_.rtol) + ")";
    if (options_.atol) line += " (atol " + detail::format_number(*options_.atol) + ")";
    line += "; steps " + std::to_string(step - 1) + " and " + std::to_string(step) +
            " recorded as bad.";
    SpikeAction action = options_.on_spike;
    if (action == SpikeAction::rollback) {
      if (rollbacks_ < options_.max_rollbacks) {
        ++rollbacks_;
        const std::string which = "(rollback " + std::to_string(rollbacks_) + " of " +
                                  std::to_string(options_.max_rollbacks) + ")";
        log(Severity::warning, line + " Rolling back to the latest checkpoint " + which + ".");
        throw RollbackRequest("SpikeHook: loss spike at global step " + std::to_string(step) +
                              " " + which);
      }
      action = options_.after_rollbacks;
      line += " No rollback left (max_rollbacks " + std::to_string(options_.max_rollbacks) +
              "): " + (action == SpikeAction::raise ? "raising." : "stopping.");
    }
    log(Severity::warning, line);
    if (action == SpikeAction::raise) throw TrainingSpikeError(step);
    return true;
  }

  SpikeOptions options_;
  SpikeDetector detector_;
  std::int64_t checks_ = 0;
  std::int64_t rollbacks_ = 0;
  std::vector<std::int64_t> bad_steps_;
};

}  // namespace runhooks
