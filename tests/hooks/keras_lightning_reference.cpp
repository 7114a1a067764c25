// Replays what Keras 3.15.1 and Lightning 2.6.6 recorded in
// tests/fixtures/keras_lightning_reference/fixtures.hpp (tools/keras_lightning_reference/) through
// runhooks' hooks, and compares: where EarlyStoppingHook stops, why, its best and its wait
// (Lightning's and Keras' EarlyStopping); the learning rate, wait and cooldown after every check
// of ReduceLROnPlateauHook (Keras' ReduceLROnPlateau); NanTensorHook's inf_too stop (Keras'
// TerminateOnNaN); every decision of SpikeDetector (Lightning's SpikeDetection); TimeLimitHook's
// stop and parse_duration (Lightning's Timer).
//
// How the devices map: an epoch or a validation is one run of a session whose backend returns the
// sequence's next value (one check per run, every_n_iter 1); Keras' epoch and Lightning's index
// count from 0, runhooks' global step from 1.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/hooks/spike_hook.hpp>
#include <runhooks/hooks/time_limit_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>

#include <fixtures/keras_lightning_reference/fixtures.hpp>

namespace fx = runhooks_test::keras_lightning;

namespace {

struct Metric : runhooks::Key<double> {
  static constexpr std::string_view name = "val_loss";
};

// The sequence's value after each run; the global step counts runs from 1.
struct SequenceBackend {
  std::span<const double> values;
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(Metric) const { return values[static_cast<std::size_t>(step - 1)]; }
};

// The same, with a learning rate stored as Keras' optimizer stores it: a float32 variable.
struct RateBackend : SequenceBackend {
  float rate;
  double learning_rate() const { return static_cast<double>(rate); }
  void set_learning_rate(double r) { rate = static_cast<float>(r); }
};

std::vector<std::string>* g_lines = nullptr;
void capture(runhooks::Severity, std::string_view line) {
  if (g_lines != nullptr) g_lines->emplace_back(line);
}
struct LogGuard {
  std::vector<std::string> lines;
  LogGuard() {
    g_lines = &lines;
    runhooks::set_log_sink(capture);
  }
  ~LogGuard() {
    runhooks::set_log_sink(nullptr);
    g_lines = nullptr;
  }
};

// Runs one check per value until the hook stops; returns the 0-based index of the stop.
template <class Backend, class Hook>
std::optional<std::int64_t> run_sequence(Hook& hook, Backend backend) {
  const auto size = static_cast<std::int64_t>(backend.values.size());
  runhooks::SingularMonitoredSession session{std::move(backend), std::ref(hook)};
  while (!session.should_stop() && session.raw_session().step < size) session.run();
  if (!session.should_stop() || session.raw_session().step == 0) return std::nullopt;
  return session.raw_session().step - 1;
}

runhooks::EarlyStoppingReason reason_of(fx::LightningReason r) {
  switch (r) {
    case fx::LightningReason::NOT_STOPPED: return runhooks::EarlyStoppingReason::not_stopped;
    case fx::LightningReason::STOPPING_THRESHOLD: return runhooks::EarlyStoppingReason::stopping_threshold;
    case fx::LightningReason::DIVERGENCE_THRESHOLD: return runhooks::EarlyStoppingReason::divergence_threshold;
    case fx::LightningReason::PATIENCE_EXHAUSTED: return runhooks::EarlyStoppingReason::patience_exhausted;
    case fx::LightningReason::NON_FINITE_METRIC: return runhooks::EarlyStoppingReason::non_finite_metric;
  }
  return runhooks::EarlyStoppingReason::not_stopped;
}

}  // namespace

TEST_CASE("Lightning 2.6.6 EarlyStopping: the stop, its reason, the best and the wait count") {
  for (const auto& k : fx::lightning_early_stopping) {
    INFO(k.name);
    LogGuard log;
    runhooks::EarlyStoppingHook<Metric> hook(
        {.mode = k.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
         .min_delta = k.min_delta,
         .patience = k.patience,
         .stopping_threshold = k.stopping_threshold,
         .divergence_threshold = k.divergence_threshold,
         .check_finite = k.check_finite});
    CHECK(run_sequence(hook, SequenceBackend{k.values}) == k.stopped_index);
    CHECK(hook.stop_reason() == reason_of(k.reason));
    CHECK(hook.wait() == k.wait_count);
    // Lightning's best_score starts at +-inf: runhooks' best() is empty until a value improves.
    if (std::isinf(k.best))
      CHECK_FALSE(hook.best().has_value());
    else
      CHECK(hook.best() == k.best);
    if (k.stopped_index) {
      CHECK(log.lines.size() == 1);
      CHECK(hook.stop_message() == log.lines.at(0));
    } else {
      CHECK(log.lines.empty());
      CHECK(hook.stop_message().empty());
    }
  }
}

TEST_CASE("Keras 3.15.1 EarlyStopping: NaN and inf mid-sequence, ties; the first-value difference") {
  for (const auto& k : fx::keras_early_stopping) {
    INFO(k.name);
    LogGuard log;
    runhooks::EarlyStoppingHook<Metric> hook(
        {.mode = k.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
         .min_delta = k.min_delta,
         .patience = k.patience});
    const auto stopped = run_sequence(hook, SequenceBackend{k.values});
    if (!k.differs) {
      CHECK(stopped == k.stopped_epoch);
      CHECK(hook.best() == k.best);
      CHECK(hook.best_step() == (k.best_epoch ? std::optional(*k.best_epoch + 1) : std::nullopt));
      CHECK(hook.wait() == k.wait);
    } else {
      // Keras >= 3.7 takes a first NaN or +inf as the best (and a NaN best is never improved
      // on); runhooks starts at +inf, so its best is empty or finite
      // (docs/coming-from-keras-and-lightning.md).
      REQUIRE(k.best.has_value());
      CHECK_FALSE(std::isfinite(*k.best));
      CHECK((!hook.best() || std::isfinite(*hook.best())));
    }
  }
}

TEST_CASE("Keras 3.15.1 ReduceLROnPlateau: the rate, wait and cooldown after every check") {
  for (const auto& k : fx::keras_reduce_lr) {
    INFO(k.name);
    LogGuard log;
    runhooks::ReduceLROnPlateauHook<Metric> hook(
        {.mode = k.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
         .factor = k.factor,
         .patience = k.patience,
         .min_delta = k.min_delta,
         .cooldown = k.cooldown,
         .min_lr = k.min_lr});
    runhooks::SingularMonitoredSession session{
        RateBackend{{k.values}, static_cast<float>(k.initial_lr)}, std::ref(hook)};
    std::int64_t reductions = 0;
    for (std::size_t i = 0; i < k.values.size(); ++i) {
      INFO("epoch " << i);
      session.run();
      CHECK(session.raw_session().learning_rate() == k.lrs[i]);
      CHECK(hook.wait() == k.waits[i]);
      CHECK(hook.cooldown_counter() == k.cooldowns[i]);
      if (i > 0 && k.lrs[i] != k.lrs[i - 1]) ++reductions;
    }
    CHECK(hook.reductions() == reductions);
    CHECK(log.lines.size() == static_cast<std::size_t>(reductions));
    CHECK(hook.best() == k.best);
  }
}

TEST_CASE("Keras 3.15.1 ReduceLROnPlateau: a factor of 1 or more is rejected") {
  for (const auto& k : fx::keras_reduce_lr_errors) {
    const std::string keras = "Keras: " + std::string(k.message.substr(0, 50));
    CHECK_THROWS_WITH_AS(runhooks::ReduceLROnPlateauHook<Metric>({.factor = k.factor}),
                         doctest::Contains(keras.c_str()), std::invalid_argument);
  }
}

TEST_CASE("Lightning 2.6.6 Timer: DD:HH:MM:SS durations and their errors") {
  for (const auto& k : fx::lightning_timer_durations) {
    INFO(k.text);
    if (k.secs) {
      CHECK(runhooks::parse_duration(k.text) == *k.secs);
    } else {
      CHECK_THROWS_WITH_AS(runhooks::parse_duration(k.text), std::string(k.error).c_str(),
                           std::invalid_argument);
    }
  }
}

namespace {
// Moves the clock to clock[i + 1] during run i, as the mocked time.monotonic read after batch i.
struct ClockBackend {
  std::span<const double> clock;
  runhooks::ManualClock manual;
  std::int64_t step = 0;
  void run() {
    ++step;
    manual.set(clock[static_cast<std::size_t>(step)]);
  }
  std::int64_t global_step() const { return step; }
};
}  // namespace

TEST_CASE("Lightning 2.6.6 Timer: the stop, at creation for a spent restored budget, after a step otherwise") {
  for (const auto& k : fx::lightning_timer) {
    INFO(k.name);
    LogGuard log;
    runhooks::ManualClock clock(k.clock[0]);
    // A resolution far below the steps: the clock is read after every run, as Lightning does.
    runhooks::TimeLimitHook<runhooks::ManualClock> hook({.max_secs = k.duration_secs,
                                                         .resolution_secs = 1e-9},
                                                        clock);
    if (k.offset) hook.restore({*k.offset});
    runhooks::SingularMonitoredSession session{ClockBackend{k.clock, clock}, std::ref(hook)};
    std::optional<std::int64_t> stop;
    if (session.should_stop()) stop = -1;
    while (!stop && session.raw_session().step + 1 < static_cast<std::int64_t>(k.clock.size())) {
      session.run();
      if (session.should_stop()) stop = session.raw_session().step - 1;
    }
    CHECK(stop == k.stop_index);
    CHECK(hook.stopped() == k.stop_index.has_value());
    if (k.elapsed_at_stop) CHECK(hook.elapsed() == *k.elapsed_at_stop);
    if (!k.message.empty()) {
      REQUIRE(log.lines.size() == 1);
      // Lightning's words up to its "Signaling Trainer to stop."
      const std::string_view lightning = k.message.substr(0, k.message.find(" Signaling"));
      CHECK(log.lines[0].find(lightning) != std::string::npos);
    }
  }
}

TEST_CASE("Keras 3.15.1 TerminateOnNaN: NanTensorHook({.inf_too = true}) stops at the same batch") {
  for (const auto& k : fx::keras_terminate_on_nan) {
    INFO(k.name);
    LogGuard log;
    runhooks::NanTensorHook<Metric> hook({.fail_on_nan_loss = false, .inf_too = true});
    CHECK(run_sequence(hook, SequenceBackend{k.values}) == k.stopped_batch);
    // TensorFlow's rule, the default, stops on NaN only.
    runhooks::NanTensorHook<Metric> nan_only({.fail_on_nan_loss = false});
    const auto nan_stop = run_sequence(nan_only, SequenceBackend{k.values});
    if (k.stopped_batch && std::isnan(k.values[static_cast<std::size_t>(*k.stopped_batch)]))
      CHECK(nan_stop == k.stopped_batch);
    else
      CHECK_FALSE(nan_stop.has_value());
  }
}

TEST_CASE("Lightning 2.6.6 SpikeDetection: every batch's decision, the bad batches, the last value kept") {
  for (const auto& k : fx::lightning_spike) {
    INFO(k.name);
    runhooks::SpikeDetector detector({.mode = k.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
                                      .window = k.window,
                                      .warmup = k.warmup,
                                      .atol = k.atol,
                                      .rtol = k.rtol,
                                      .finite_only = k.finite_only});
    std::vector<std::int64_t> spikes;
    for (std::size_t i = 0; i < k.values.size(); ++i)
      if (detector.observe(k.values[i], static_cast<std::int64_t>(i)))
        spikes.push_back(static_cast<std::int64_t>(i));
    CHECK(spikes == std::vector<std::int64_t>(k.spikes.begin(), k.spikes.end()));
    CHECK(detector.last() == k.last_val);
    // The hook stops at the first spike, with Lightning's [batch - 1, batch] in global steps.
    LogGuard log;
    runhooks::SpikeHook<Metric> hook({.mode = k.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
                                      .window = k.window,
                                      .warmup = k.warmup,
                                      .atol = k.atol,
                                      .rtol = k.rtol,
                                      .finite_only = k.finite_only,
                                      .on_spike = runhooks::SpikeAction::stop});
    const auto stop = run_sequence(hook, SequenceBackend{k.values});
    if (k.spikes.empty()) {
      CHECK_FALSE(stop.has_value());
      CHECK(hook.bad_steps().empty());
    } else {
      CHECK(stop == k.spikes[0]);
      CHECK(hook.bad_steps() == std::vector<std::int64_t>{k.bad_batches[0] + 1, k.bad_batches[1] + 1});
      CHECK(log.lines.size() == 1);
    }
  }
}
