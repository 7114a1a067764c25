// ThroughputMonitorHook: samples, items (tokens), FLOPs and MFU per second over a window of
// report points, handed to StepCounterHook's output policies (Lightning's ThroughputMonitor).
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>  // LogOutput, CallbackOutput, the output concept
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

struct ThroughputOptions {
  // A report point after the first run of each session and then every this many global steps.
  // At least 1.
  std::int64_t every_n_steps = 100;
  // How many report points a rate spans: the rates compare the newest point with the one
  // window_size - 1 reports before it, and nothing is recorded until that many points exist
  // (Lightning's window_size, counted in report points rather than batches). At least 2.
  std::int64_t window_size = 2;
  // Samples (the batch size) and items (tokens, say) per global step, when they are constant.
  // A counter key given to the hook (ThroughputKeys) replaces the option; giving both is an error.
  std::optional<double> samples_per_step{};
  std::optional<double> items_per_step{};
  // FLOPs one sample costs on this device, forward and backward (Lightning's flops_per_batch
  // divided by the batch size; measure_flops() gives it). Needs a samples source.
  std::optional<double> flops_per_sample{};
  // The device's peak FLOP/s, for MFU = device FLOP/s / available_flops (Lightning's
  // available_flops). Needs flops_per_sample.
  std::optional<double> available_flops{};
  // Processes training alike; the global rates are the device rates times this (Lightning).
  std::int64_t world_size = 1;

  const ThroughputOptions& validate() const {
    if (every_n_steps < 1) bad("every_n_steps", std::to_string(every_n_steps), "must be at least 1");
    // Lightning: "Expected window_size to be greater than 1".
    if (window_size < 2) bad("window_size", std::to_string(window_size), "must be at least 2");
    if (world_size < 1) bad("world_size", std::to_string(world_size), "must be at least 1");
    positive("samples_per_step", samples_per_step);
    positive("items_per_step", items_per_step);
    positive("flops_per_sample", flops_per_sample);
    positive("available_flops", available_flops);
    if (available_flops && !flops_per_sample)
      bad("available_flops", detail::format_number(*available_flops),
          "needs flops_per_sample (MFU is FLOP/s over available_flops)");
    return *this;
  }

 private:
  [[noreturn]] static void bad(const char* option, const std::string& value, const char* why) {
    throw std::invalid_argument(std::string("runhooks: ThroughputOptions::") + option + " " + why +
                                ", got " + value + ".");
  }
  static void positive(const char* option, const std::optional<double>& value) {
    if (value && !(std::isfinite(*value) && *value > 0.0))
      bad(option, detail::format_number(*value), "must be finite and greater than 0");
  }
};

// The keys of the backend's cumulative counters, for samples and items (tokens) seen since the
// start of training: `value fetch(SamplesSeen) const` returning a count that never goes down
// (Lightning's samples and lengths). void: the option's constant per step, or none.
template <class SamplesKey = void, class ItemsKey = void>
struct ThroughputKeys {};
template <class SamplesKey, class ItemsKey = void>
inline constexpr ThroughputKeys<SamplesKey, ItemsKey> throughput_keys{};

// Lightning's ThroughputMonitor (fabric's Throughput) without its per-batch work. Every
// every_n_steps global steps (and after the first run of a session) the hook takes a report
// point: the clock, the global step, and the cumulative samples and items, read from the
// backend's counter keys at that step (never on the others) or computed as the option's
// constant times the global step. Once window_size points exist, it records the rates between
// the oldest and the newest point of the window, with Lightning's names:
//   device/batches_per_sec, device/samples_per_sec, device/items_per_sec,
//   device/flops_per_sec (samples x flops_per_sample), device/mfu (over available_flops),
// and the global ones (times world_size): batches_per_sec, samples_per_sec, items_per_sec,
// flops_per_sec. Each goes to the output as record(name, value, global_step): LogOutput (the
// default), CsvOutput (the third column is the value), SummaryOutput (a TensorBoard scalar),
// CallbackOutput. Only the metrics it has a source for are recorded.
//
// A batch is a global step. A counter that goes down while the global step goes up is a
// std::runtime_error naming the key and both values (Lightning's "Expected the value to
// increase"); a global step that goes back (a recovery restored an older checkpoint), like a new
// session or a re-created backend, starts the window again. Per silent step: one compare of the
// global step with the next report step; no clock read, no fetch (Lightning synchronizes the
// device and updates its window on every batch).
template <class Keys = ThroughputKeys<>, class Output = LogOutput, Clock C = SteadyClock>
class ThroughputMonitorHook;

template <class SamplesKey, class ItemsKey, class Output, Clock C>
class ThroughputMonitorHook<ThroughputKeys<SamplesKey, ItemsKey>, Output, C> {
  static constexpr bool samples_key = !std::is_void_v<SamplesKey>;
  static constexpr bool items_key = !std::is_void_v<ItemsKey>;

 public:
  // Output's default only where it has one: a default argument `Output output = {}` would make
  // std::is_default_constructible of a hook with a SummaryOutput (std::optional<Hook>, Conditional)
  // a hard error with clang++ instead of false.
  explicit ThroughputMonitorHook(ThroughputOptions options = {})
    requires std::default_initializable<Output>
      : ThroughputMonitorHook(std::move(options), Output{}) {}
  explicit ThroughputMonitorHook(ThroughputOptions options, Output output, C clock = {})
      : options_(checked(std::move(options))), output_(std::move(output)),
        clock_(std::move(clock)) {
    points_.resize(static_cast<std::size_t>(options_.window_size));
  }
  ThroughputMonitorHook(ThroughputKeys<SamplesKey, ItemsKey>, ThroughputOptions options)
    requires std::default_initializable<Output>
      : ThroughputMonitorHook(std::move(options), Output{}) {}
  ThroughputMonitorHook(ThroughputKeys<SamplesKey, ItemsKey>, ThroughputOptions options,
                        Output output, C clock = {})
      : ThroughputMonitorHook(std::move(options), std::move(output), std::move(clock)) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names ThroughputOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                ThroughputOptions, &ThroughputOptions::every_n_steps,
                &ThroughputOptions::window_size, &ThroughputOptions::samples_per_step,
                &ThroughputOptions::items_per_step, &ThroughputOptions::flops_per_sample,
                &ThroughputOptions::available_flops, &ThroughputOptions::world_size>>
  explicit ThroughputMonitorHook(...) = delete;  // Misspelt field? Write ThroughputOptions{...} to see which

  void begin() noexcept { restart(); }

  template <class Backend>
  void after_create_session(Backend& backend) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::ThroughputMonitorHook needs a backend with `std::int64_t "
                  "global_step() const`; the backend type is named in this instantiation.");
    if constexpr (samples_key) static_assert(detail::check_hook_keys<ThroughputMonitorHook, Backend, SamplesKey>());
    if constexpr (items_key) static_assert(detail::check_hook_keys<ThroughputMonitorHook, Backend, ItemsKey>());
    restart();  // the time a re-creation took is not training
    backend_ = &backend;
    if constexpr (samples_key)
      read_samples_ = [](void* b) {
        return static_cast<double>(static_cast<Backend*>(b)->fetch(SamplesKey{}));
      };
    if constexpr (items_key)
      read_items_ = [](void* b) {
        return static_cast<double>(static_cast<Backend*>(b)->fetch(ItemsKey{}));
      };
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (HasGlobalStep<Backend> && readable<Backend>) {
      const std::int64_t step = detail::global_step_of(run_context);
      if (step >= next_) [[unlikely]]
        if (const std::exception_ptr error = report(step)) [[unlikely]]
          std::rethrow_exception(error);
    }
  }

  const ThroughputOptions& options() const noexcept { return options_; }
  Output& output() noexcept { return output_; }
  C& clock() noexcept { return clock_; }

 private:
  struct Point {
    double secs = 0.0;
    std::int64_t step = 0;
    double samples = 0.0;
    double items = 0.0;
  };

  template <class Backend>
  static constexpr bool readable = (!samples_key || detail::fetches_all<Backend, SamplesKey>) &&
                                   (!items_key || detail::fetches_all<Backend, ItemsKey>);

  static ThroughputOptions checked(ThroughputOptions options) {
    options.validate();
    if (samples_key && options.samples_per_step)
      throw std::invalid_argument(
          "runhooks: ThroughputOptions::samples_per_step is given, got " +
          detail::format_number(*options.samples_per_step) + ", and so is the samples key " +
          std::string(key_name_of<SamplesKey>()) + ": give one source.");
    if (items_key && options.items_per_step)
      throw std::invalid_argument(
          "runhooks: ThroughputOptions::items_per_step is given, got " +
          detail::format_number(*options.items_per_step) + ", and so is the items key " +
          std::string(key_name_of<ItemsKey>()) + ": give one source.");
    if (options.flops_per_sample && !samples_key && !options.samples_per_step)
      throw std::invalid_argument(
          "runhooks: ThroughputOptions::flops_per_sample needs samples, got " +
          detail::format_number(*options.flops_per_sample) +
          " without samples_per_step or a samples key.");
    return options;
  }

  template <class K>
  static constexpr std::string_view key_name_of() {
    if constexpr (std::is_void_v<K>)
      return "";
    else
      return key_name<K>();
  }

  void restart() noexcept {
    count_ = 0;
    next_ = std::numeric_limits<std::int64_t>::min();
  }

  template <class K>
  static double counter(double value, double previous, std::int64_t step, bool compare) {
    if (compare && value < previous)
      throw std::runtime_error(
          "runhooks: ThroughputMonitorHook: the counter " + std::string(key_name<K>()) +
          " went down from " + detail::format_number(previous) + " to " +
          detail::format_number(value) + " at global step " + std::to_string(step) +
          "; it must count every sample or item seen since the start.");
    return value;
  }

  // A report point, and the rates once the window is full. What it throws (a counter that went
  // down, an output's error) is returned and rethrown by after_run: a call that may throw on the
  // rare path cost g++ one instruction on every silent step (the instruction-count suite), as did
  // passing the backend, which the readers made by after_create_session reach instead.
  [[gnu::noinline]] std::exception_ptr report(std::int64_t step) noexcept {
    try {
      report_point(step);
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }

  void report_point(std::int64_t step) {
    next_ = detail::saturating_add(step, options_.every_n_steps);
    const std::size_t window = points_.size();
    if (count_ > 0 && step <= newest().step) {
      // A recovery restored an older state: the counters went back with the global step.
      if (step < newest().step)
        log(Severity::warning, "ThroughputMonitorHook: global step went back from " +
                                   std::to_string(newest().step) + " to " +
                                   std::to_string(step) + "; the window starts again.");
      count_ = 0;
    }
    const bool compare = count_ > 0;
    const Point previous = compare ? newest() : Point{};
    Point point;
    point.secs = static_cast<double>(clock_.now());
    point.step = step;
    if constexpr (samples_key)
      point.samples = counter<SamplesKey>(read_samples_(backend_), previous.samples, step, compare);
    else if (options_.samples_per_step)
      point.samples = *options_.samples_per_step * static_cast<double>(step);
    if constexpr (items_key)
      point.items = counter<ItemsKey>(read_items_(backend_), previous.items, step, compare);
    else if (options_.items_per_step)
      point.items = *options_.items_per_step * static_cast<double>(step);
    points_[static_cast<std::size_t>(count_ % static_cast<std::int64_t>(window))] = point;
    ++count_;
    if (count_ < static_cast<std::int64_t>(window)) return;  // Lightning: no rate until full
    const Point& oldest = points_[static_cast<std::size_t>(count_ % static_cast<std::int64_t>(window))];
    const double secs = point.secs - oldest.secs;
    if (!(secs > 0.0)) return;
    const double world = static_cast<double>(options_.world_size);
    const auto both = [&](const char* device, const char* global, double per_sec) {
      output_.record(device, per_sec, step);
      output_.record(global, per_sec * world, step);
    };
    both("device/batches_per_sec", "batches_per_sec",
         static_cast<double>(point.step - oldest.step) / secs);
    const bool has_samples = samples_key || options_.samples_per_step.has_value();
    const bool has_items = items_key || options_.items_per_step.has_value();
    const double samples_per_sec = (point.samples - oldest.samples) / secs;
    if (has_samples) both("device/samples_per_sec", "samples_per_sec", samples_per_sec);
    if (has_items) both("device/items_per_sec", "items_per_sec", (point.items - oldest.items) / secs);
    if (options_.flops_per_sample) {
      const double flops_per_sec = samples_per_sec * *options_.flops_per_sample;
      both("device/flops_per_sec", "flops_per_sec", flops_per_sec);
      if (options_.available_flops)
        output_.record("device/mfu", flops_per_sec / *options_.available_flops, step);
    }
  }

  const Point& newest() const noexcept {
    const auto window = static_cast<std::int64_t>(points_.size());
    return points_[static_cast<std::size_t>((count_ - 1) % window)];
  }

  ThroughputOptions options_;
  [[no_unique_address]] Output output_;
  [[no_unique_address]] C clock_;
  std::int64_t next_ = std::numeric_limits<std::int64_t>::min();
  std::int64_t count_ = 0;  // report points taken since the window started
  std::vector<Point> points_;  // a ring of window_size points
  void* backend_ = nullptr;    // the backend after_create_session saw, for the readers below
  double (*read_samples_)(void*) = nullptr;  // its SamplesKey, with a samples key
  double (*read_items_)(void*) = nullptr;    // its ItemsKey, with an items key
};

// `ThroughputMonitorHook hook;` (see StepCounterHook's guides for why this one is spelled out).
ThroughputMonitorHook() -> ThroughputMonitorHook<>;
ThroughputMonitorHook(ThroughputOptions) -> ThroughputMonitorHook<>;
template <class Output>
ThroughputMonitorHook(ThroughputOptions, Output) -> ThroughputMonitorHook<ThroughputKeys<>, Output>;
template <class Output, Clock C>
ThroughputMonitorHook(ThroughputOptions, Output, C) -> ThroughputMonitorHook<ThroughputKeys<>, Output, C>;
template <class S, class I>
ThroughputMonitorHook(ThroughputKeys<S, I>, ThroughputOptions)
    -> ThroughputMonitorHook<ThroughputKeys<S, I>>;
template <class S, class I, class Output>
ThroughputMonitorHook(ThroughputKeys<S, I>, ThroughputOptions, Output)
    -> ThroughputMonitorHook<ThroughputKeys<S, I>, Output>;
template <class S, class I, class Output, Clock C>
ThroughputMonitorHook(ThroughputKeys<S, I>, ThroughputOptions, Output, C)
    -> ThroughputMonitorHook<ThroughputKeys<S, I>, Output, C>;

}  // namespace runhooks
