// SpikeHook: stops training on a loss spike, by Lightning's SpikeDetection rule.
#pragma once

#include <runhooks/detail/config.hpp>

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
#include <runhooks/session_run_args.hpp>

namespace runhooks {

// Lightning's TrainingSpikeException.
class TrainingSpikeError : public Error {
 public:
  explicit TrainingSpikeError(std::int64_t step)
      : Error("Training spike detected at global step " + std::to_string(step)) {}
};

// What SpikeHook does on a spike: throw TrainingSpikeError as Lightning does (the run ends
// without end(), so no final checkpoint of weights the spike may have spoiled), or request a
// clean stop. Rolling back to the latest checkpoint is planned (issue 27, item 6).
enum class SpikeAction { raise, stop };

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

 private:
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

// Lightning's SpikeDetection on a loss the backend computes: fetches LossKey after every run (as
// Lightning checks every batch, and as NanTensorHook does), counts its checks from 0 since begin(),
// and on a spike records the global steps [step - 1, step] in bad_steps() (Lightning's
// bad_batches: the previous step may have spoiled the weights), logs
//   SpikeHook: loss spike at global step 12: loss = 3.5, running mean 1 (rtol 2); steps 11 and
//   12 recorded as bad.
// and throws TrainingSpikeError (SpikeAction::raise, Lightning's) or requests a clean stop
// (SpikeAction::stop). Per step: the fetch (shared with any other reader of the key) and the test,
// a sum over `window` values.
// Many processes: each rank tests its own loss; Lightning stops every rank when any spikes
// (wrap the hook's stop in the any-rank vote with SpikeAction::stop).
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
                &SpikeOptions::on_spike>>
  explicit SpikeHook(...) = delete;  // Misspelt field? Write SpikeOptions{...} to see which

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
  // Lightning's bad_batches, in global steps: two per spike.
  const std::vector<std::int64_t>& bad_steps() const noexcept { return bad_steps_; }

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
    log(Severity::warning, line);
    if (options_.on_spike == SpikeAction::raise) throw TrainingSpikeError(step);
    return true;
  }

  SpikeOptions options_;
  SpikeDetector detector_;
  std::int64_t checks_ = 0;
  std::vector<std::int64_t> bad_steps_;
};

}  // namespace runhooks
