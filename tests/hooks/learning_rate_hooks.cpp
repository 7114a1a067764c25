// ReduceLROnPlateauHook, LearningRateScheduleHook and LearningRateMonitorHook through the
// HasLearningRate concept: the NaN and missing-metric outcomes, the schedules, the monitor's
// records, validation, and the plateau's state. Keras' own sequences are replayed in
// tests/hooks/keras_lightning_reference.cpp.
#include <runhooks/hooks/learning_rate_monitor_hook.hpp>
#include <runhooks/hooks/learning_rate_schedule_hook.hpp>
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/fakes.hpp"

namespace {

struct ValLoss : runhooks::Key<double> {
  static constexpr std::string_view name = "val_loss";
};

// values[i] after run i + 1; a rate in double, as TorchBackend's optimizer options hold it.
struct RateBackend {
  std::vector<double> values;
  double rate = 1.0;
  std::int64_t step = 0;
  std::vector<double> rates_seen;  // the rate each run() ran with
  void run() {
    rates_seen.push_back(rate);
    ++step;
  }
  std::int64_t global_step() const { return step; }
  double fetch(ValLoss) const { return values.at(static_cast<std::size_t>(step - 1)); }
  double learning_rate() const { return rate; }
  void set_learning_rate(double r) { rate = r; }
};

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();

template <class Mode>
double run_plateau(runhooks::ReduceLROnPlateauHook<ValLoss, Mode>& hook, std::vector<double> values,
                   double rate = 1.0) {
  const std::size_t n = values.size();
  runhooks::MonitoredSession session{RateBackend{std::move(values), rate, 0, {}}, std::ref(hook)};
  for (std::size_t i = 0; i < n; ++i) session.run();
  return session.raw_session().rate;
}

}  // namespace

TEST_CASE("ReduceLROnPlateau: a NaN never improves and counts toward the patience") {
  fakes::LogCapture capture;
  runhooks::ReduceLROnPlateauHook<ValLoss> hook({.factor = 0.5, .patience = 2});
  CHECK(run_plateau(hook, {1.0, nan_value, nan_value, nan_value}) == 0.5);
  CHECK(hook.best() == 1.0);
  CHECK(hook.wait() == 1);
  CHECK(capture.lines() == std::vector<std::string>{
                               "ReduceLROnPlateauHook: reducing the learning rate to 0.5 at "
                               "global step 3 (val_loss did not improve on 1 by more than "
                               "0.0001 in 2 checks)."});
}

TEST_CASE("ReduceLROnPlateau: a first NaN is no best (Keras >= 3.7 would keep it and never improve)") {
  fakes::LogCapture capture;
  // Keras: best NaN, then 1 and 0.5 do not improve on it: wait 2, a reduction at the third check.
  runhooks::ReduceLROnPlateauHook<ValLoss> hook({.factor = 0.5, .patience = 2});
  CHECK(run_plateau(hook, {nan_value, 1.0, 0.5, 0.25}) == 1.0);
  CHECK(hook.best() == 0.25);
  CHECK(hook.reductions() == 0);
  // +inf in mode min likewise; -inf is the best a loss can be.
  runhooks::ReduceLROnPlateauHook<ValLoss> inf({.factor = 0.5, .patience = 2});
  CHECK(run_plateau(inf, {inf_value, 1.0}) == 1.0);
  CHECK(inf.best() == 1.0);
}

TEST_CASE("ReduceLROnPlateau: the metric is fetched only on check runs; between checks no change") {
  fakes::LogCapture capture;
  runhooks::ReduceLROnPlateauHook<ValLoss> hook({.factor = 0.5, .patience = 1, .every_n_iter = 3});
  // Checks after runs 3, 6, 9: values[2] = 1, values[5] = 1 (wait 1: reduce), values[8] = 1.
  CHECK(run_plateau(hook, std::vector<double>(9, 1.0)) == 0.25);
  CHECK(hook.checks() == 3);
  // Values at the other runs are never read: a vector of NaN there changes nothing.
  runhooks::ReduceLROnPlateauHook<ValLoss> sparse({.factor = 0.5, .patience = 1, .every_n_iter = 3});
  CHECK(run_plateau(sparse, {nan_value, nan_value, 1.0, nan_value, nan_value, 0.5}) == 1.0);
}

TEST_CASE("ReduceLROnPlateau: state() and restore() carry best, wait and cooldown") {
  fakes::LogCapture capture;
  runhooks::ReduceLROnPlateauHook<ValLoss> straight({.factor = 0.5, .patience = 3});
  CHECK(run_plateau(straight, {1.0, 1.0, 1.0, 1.0}) == 0.5);
  runhooks::ReduceLROnPlateauHook<ValLoss> first({.factor = 0.5, .patience = 3});
  CHECK(run_plateau(first, {1.0, 1.0}) == 1.0);
  const runhooks::ReduceLROnPlateauState saved = first.state();
  CHECK(saved.wait == 1);
  runhooks::ReduceLROnPlateauHook<ValLoss> resumed({.factor = 0.5, .patience = 3});
  runhooks::MonitoredSession session{RateBackend{{1.0, 1.0, 1.0, 1.0}, 1.0, 2, {}}, std::ref(resumed)};
  resumed.restore(saved);
  session.run();
  session.run();
  CHECK(session.raw_session().rate == 0.5);
  CHECK_THROWS_WITH_AS(resumed.restore({nan_value, 0, 0, 0}), doctest::Contains("not one this hook wrote"),
                       std::invalid_argument);
}

TEST_CASE("ReduceLROnPlateau: options are validated") {
  using O = runhooks::ReduceLROnPlateauOptions;
  CHECK_THROWS_WITH_AS((O{.factor = 1.0}.validate()),
                       "runhooks: ReduceLROnPlateauOptions::factor must be at least 0 and below 1 "
                       "(Keras: ReduceLROnPlateau does not support a factor >= 1.0), got 1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.factor = -0.5}.validate()), doctest::Contains("factor"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.patience = -1}.validate()),
                       "runhooks: ReduceLROnPlateauOptions::patience must be at least 0, got -1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.min_delta = nan_value}.validate()), doctest::Contains("min_delta"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.cooldown = -2}.validate()),
                       "runhooks: ReduceLROnPlateauOptions::cooldown must be at least 0, got -2.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.min_lr = -1e-3}.validate()), doctest::Contains("min_lr must be a finite number at least 0, got -0.001."),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.every_n_iter = 0}.validate()), doctest::Contains("every_n_iter"),
                       std::invalid_argument);
  constexpr O defaults{};
  static_assert((defaults.validate(), true));
  static_assert(defaults.factor == 0.1 && defaults.patience == 10 && defaults.min_delta == 1e-4 &&
                defaults.cooldown == 0 && defaults.min_lr == 0.0);
}

TEST_CASE("LearningRateScheduleHook: schedule(global step before the run), every N steps, after a recovery") {
  runhooks::LearningRateScheduleHook schedule{[](std::int64_t step) { return 1.0 / double(step + 1); },
                                              {.every_n_steps = 2}};
  runhooks::MonitoredSession session{RateBackend{}, std::ref(schedule)};
  for (int i = 0; i < 5; ++i) session.run();
  // Steps 0, 2, 4 evaluate: 1, 1/3, 1/5; the runs in between keep the rate.
  CHECK(session.raw_session().rates_seen == std::vector<double>{1.0, 1.0, 1.0 / 3, 1.0 / 3, 0.2});
  CHECK(schedule.last_rate() == 0.2);
}

TEST_CASE("LearningRateScheduleHook: a NaN, infinite or negative rate throws, naming step and value") {
  runhooks::LearningRateScheduleHook bad{[](std::int64_t step) { return step == 2 ? -1.0 : 0.5; }};
  runhooks::MonitoredSession session{RateBackend{}, std::ref(bad)};
  session.run();
  session.run();
  CHECK_THROWS_WITH_AS(session.run(),
                       "runhooks: LearningRateScheduleHook: the schedule gave -1 at global step 2; "
                       "a learning rate must be a finite number at least 0.",
                       std::invalid_argument);
  CHECK_THROWS_AS(runhooks::LearningRateScheduleHook([](std::int64_t) { return 1.0; }, {.every_n_steps = 0}),
                  std::invalid_argument);
}

TEST_CASE("Schedules: warmup + cosine decay, step decay") {
  const runhooks::WarmupCosineDecay cosine({.peak_lr = 1.0, .warmup_steps = 4, .decay_steps = 10,
                                            .final_lr = 0.1});
  CHECK(cosine(0) == 0.25);
  CHECK(cosine(3) == 1.0);
  CHECK(cosine(4) == 1.0);
  CHECK(cosine(9) == doctest::Approx(0.55));
  CHECK(cosine(14) == 0.1);
  CHECK(cosine(1000) == 0.1);
  const runhooks::StepDecay step({.initial_lr = 0.5, .step_size = 3, .gamma = 0.5});
  CHECK(step(0) == 0.5);
  CHECK(step(2) == 0.5);
  CHECK(step(3) == 0.25);
  CHECK(step(7) == 0.125);
  CHECK_THROWS_WITH_AS(runhooks::WarmupCosineDecay({.peak_lr = 1.0, .final_lr = 2.0}),
                       "runhooks: WarmupCosineDecayOptions::final_lr must be at least 0 and at most "
                       "peak_lr (1), got 2.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::WarmupCosineDecay({.peak_lr = 0.0}), doctest::Contains("peak_lr"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::WarmupCosineDecay({.peak_lr = 1.0, .warmup_steps = -1}),
                       doctest::Contains("warmup_steps"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::WarmupCosineDecay({.peak_lr = 1.0, .decay_steps = 0}),
                       doctest::Contains("decay_steps"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::StepDecay({.initial_lr = 1.0, .step_size = 0}),
                       "runhooks: StepDecayOptions::step_size must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::StepDecay({.initial_lr = 1.0, .gamma = 1.5}), doctest::Contains("gamma"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::StepDecay({.initial_lr = inf_value}), doctest::Contains("initial_lr"),
                       std::invalid_argument);
}

TEST_CASE("LearningRateMonitorHook: the rate after the first run and every N steps, with the schedule's changes") {
  std::vector<std::string> records;
  runhooks::MonitoredSession session{
      RateBackend{},
      runhooks::LearningRateScheduleHook{runhooks::StepDecay({.initial_lr = 0.5, .step_size = 2, .gamma = 0.5})},
      runhooks::LearningRateMonitorHook{
          {.every_n_steps = 2, .tag = "lr-SGD"},
          runhooks::CallbackOutput{[&](std::string_view tag, double rate, std::int64_t step) {
            records.push_back(std::string(tag) + "@" + std::to_string(step) + "=" +
                              std::to_string(rate));
          }}}};
  for (int i = 0; i < 5; ++i) session.run();
  CHECK(records == std::vector<std::string>{"lr-SGD@1=0.500000", "lr-SGD@3=0.250000",
                                            "lr-SGD@5=0.125000"});
  CHECK_THROWS_WITH_AS(runhooks::LearningRateMonitorHook({.every_n_steps = 0}),
                       "runhooks: LearningRateMonitorOptions::every_n_steps must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_AS(runhooks::LearningRateMonitorHook({.tag = ""}), std::invalid_argument);
}

namespace {
struct Accuracy : runhooks::Key<double> {
  static constexpr runhooks::MetricMode direction = runhooks::MetricMode::max;
};
}  // namespace

TEST_CASE("ReduceLROnPlateau: the mode comes from the key's declared direction") {
  CHECK(runhooks::ReduceLROnPlateauHook<Accuracy>().mode() == runhooks::MetricMode::max);
  CHECK(runhooks::ReduceLROnPlateauHook<ValLoss>().mode() == runhooks::MetricMode::min);
  CHECK_THROWS_WITH_AS(runhooks::ReduceLROnPlateauHook<Accuracy>({.mode = runhooks::MetricMode::min}),
                       doctest::Contains("ReduceLROnPlateauOptions::mode is min, but the key Accuracy "
                                         "declares direction max."),
                       std::invalid_argument);
}

TEST_CASE("ReduceLROnPlateau: a mode tag puts the mode in the type; options.mode must agree with it") {
  runhooks::ReduceLROnPlateauHook hook{runhooks::keys<ValLoss>, runhooks::maximize,
                                       {.factor = 0.5, .patience = 2}};
  static_assert(std::is_same_v<decltype(hook),
                               runhooks::ReduceLROnPlateauHook<ValLoss, runhooks::Maximize>>);
  CHECK(hook.mode() == runhooks::MetricMode::max);
  CHECK(hook.options().factor == 0.5);
  // Rising values improve in mode max: no reduction (in mode min, one at the third check).
  CHECK(run_plateau(hook, {1.0, 2.0, 3.0, 4.0}) == 1.0);
  CHECK(hook.best() == 4.0);
  CHECK(runhooks::ReduceLROnPlateauHook{runhooks::keys<Accuracy>, runhooks::maximize}.mode() ==
        runhooks::MetricMode::max);
  CHECK(runhooks::ReduceLROnPlateauHook{runhooks::keys<ValLoss>, runhooks::minimize}.mode() ==
        runhooks::MetricMode::min);
  CHECK_THROWS_WITH_AS((runhooks::ReduceLROnPlateauHook{runhooks::keys<ValLoss>, runhooks::minimize,
                                                        {.mode = runhooks::MetricMode::max}}),
                       "runhooks: ReduceLROnPlateauOptions::mode is max, but the hook's mode tag is "
                       "runhooks::minimize.",
                       std::invalid_argument);
}
