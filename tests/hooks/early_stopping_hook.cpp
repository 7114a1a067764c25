// EarlyStoppingHook: Keras' EarlyStopping rules (keras/src/callbacks/early_stopping.py) on a
// metric the backend computes, the lazy fetch, the log line saying why, and option validation.
// tests/hooks/tf_reference_hooks.cpp replays sequences that real Keras recorded.

#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/fakes.hpp"

using runhooks::EarlyStoppingHook;
using runhooks::MetricMode;

namespace {

struct ValLoss : runhooks::Key<double> {
  static constexpr std::string_view name = "val_loss";
};

// The metric's value at the k-th fetch is values[k]; counts the fetches.
struct MetricBackend {
  std::vector<double> values;
  std::int64_t step = 0;
  std::size_t fetches = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(ValLoss) { return values.at(fetches++); }
};

// Notes that end() ran.
struct EndFlag {
  bool* ended;
  void end(auto&) { *ended = true; }
};

// Runs until the session stops or the values run out; returns the checks made.
std::size_t checks_until_stop(EarlyStoppingHook<ValLoss>& hook, std::vector<double> values,
                              std::int64_t runs_per_check = 1) {
  const std::size_t available = values.size();
  runhooks::MonitoredSession session{MetricBackend{std::move(values)}, std::ref(hook)};
  while (!session.should_stop() &&
         session.raw_session().fetches < available) {
    for (std::int64_t i = 0; i < runs_per_check && !session.should_stop(); ++i) session.run();
  }
  return session.raw_session().fetches;
}

}  // namespace

TEST_CASE("EarlyStopping, Keras' docstring example: patience=3 on a loss that only grows stops after 4 checks") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 3});
  CHECK(checks_until_stop(hook, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0}) == 4);
  CHECK(hook.stopped_step() == 4);
  CHECK(hook.best() == 1.0);
  CHECK(hook.best_step() == 1);
  CHECK(capture.lines() ==
        std::vector<std::string>{"EarlyStoppingHook: stopping at global step 4: val_loss did "
                                 "not improve on its best (1 at global step 1) by more than "
                                 "0 in 3 checks (patience 3)."});
}

TEST_CASE("EarlyStopping: patience=0 stops at the second check without improvement, never the first") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 0});
  CHECK(checks_until_stop(hook, {5.0, 4.0, 3.0, 3.0, 1.0}) == 4);
}

TEST_CASE("EarlyStopping: min_delta, an improvement must beat the best by more than it") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.min_delta = 0.25, .patience = 1});
  // 1.0 best; 0.875 is not enough (0.875 + 0.25 >= 1.0): wait 1 >= 1, stop at check 2.
  CHECK(checks_until_stop(hook, {1.0, 0.875, 0.5, 0.25}) == 2);
  EarlyStoppingHook<ValLoss> enough({.min_delta = 0.25, .patience = 1});
  // 0.5 + 0.25 < 1.0 improves; then 0.375 + 0.25 >= 0.5 does not: stop at check 3.
  CHECK(checks_until_stop(enough, {1.0, 0.5, 0.375, 0.0}) == 3);
}

TEST_CASE("EarlyStopping: mode max") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.mode = MetricMode::max, .patience = 2});
  CHECK(checks_until_stop(hook, {0.5, 0.75, 0.875, 0.75, 0.875, 0.5, 0.25}) == 5);
  CHECK(hook.best() == 0.875);
  CHECK(hook.best_step() == 3);
}

TEST_CASE("EarlyStopping: a baseline that is never beaten stops after patience checks") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 2, .baseline = 0.5});
  // 0.9 is the best but not below the baseline: wait stays 1, and the next check that does not
  // improve makes it 2. Without the baseline the stop comes one check later.
  CHECK(checks_until_stop(hook, {0.9, 0.95, 0.95, 0.95}) == 2);
  CHECK(capture.contains("nor on the baseline 0.5"));
  EarlyStoppingHook<ValLoss> no_baseline({.patience = 2});
  CHECK(checks_until_stop(no_baseline, {0.9, 0.95, 0.95, 0.95}) == 3);
  // Keras checks the patience only when a value does not improve on the best: values that keep
  // improving never stop, even short of the baseline.
  EarlyStoppingHook<ValLoss> improving({.patience = 2, .baseline = 0.5});
  CHECK(checks_until_stop(improving, {0.9, 0.8, 0.7, 0.6, 0.55}) == 5);
  CHECK_FALSE(improving.stopped_step().has_value());
  EarlyStoppingHook<ValLoss> beaten({.patience = 2, .baseline = 0.5});
  CHECK(checks_until_stop(beaten, {0.9, 0.4, 0.45, 0.45, 0.45, 0.45}) == 4);
}

TEST_CASE("EarlyStopping: start_from_check skips the first checks") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 0, .start_from_check = 2});
  CHECK(checks_until_stop(hook, {1.0, 2.0, 3.0, 4.0, 5.0}) == 4);
}

TEST_CASE("EarlyStopping: the metric is fetched only on the check runs") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 1, .every_n_iter = 5});
  runhooks::MonitoredSession session{MetricBackend{{3.0, 2.0, 2.5, 2.5}}, std::ref(hook)};
  int runs = 0;
  while (!session.should_stop()) {
    session.run();
    ++runs;
  }
  // Checks after runs 5, 10, 15: 3.0 best, 2.0 best, 2.5 no (wait 1 >= 1): stop after run 15.
  CHECK(runs == 15);
  CHECK(session.raw_session().fetches == 3);
  CHECK(hook.stopped_step() == 15);
  CHECK(hook.best_step() == 10);
}

TEST_CASE("EarlyStopping: begin() starts over; the stop is a clean end") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 1});
  CHECK(checks_until_stop(hook, {1.0, 2.0, 0.0}) == 2);
  CHECK(checks_until_stop(hook, {5.0, 4.0, 3.0, 3.0}) == 4);
  CHECK(hook.best() == 3.0);
  bool ended = false;
  EarlyStoppingHook<ValLoss> again({.patience = 0});
  runhooks::MonitoredSession session{MetricBackend{{1.0, 2.0}}, std::ref(again), EndFlag{&ended}};
  runhooks::run_loop(session);
  CHECK(ended);
}

// Issue 17, item 6. Keras' on_epoch_end, worked by hand: best starts at +inf (min) or -inf
// (max) and `ops.less(nan - min_delta, best)` is false, so a NaN is a check without improvement.
namespace {
constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();
}  // namespace

TEST_CASE("EarlyStopping: a first NaN is no best; NaN, 1, 0.5, 0.25, ... runs all 8 checks") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 2});
  // Keras: NaN (wait 1, no stop at epoch 0), then each value halves the best and resets wait.
  CHECK(checks_until_stop(hook, {nan_value, 1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625}) ==
        8);
  CHECK_FALSE(hook.stopped_step().has_value());
  CHECK(hook.best() == 0.015625);
  CHECK(hook.best_step() == 8);
  CHECK(hook.wait() == 0);
  CHECK(capture.lines().empty());
}

TEST_CASE("EarlyStopping: mode max, a first NaN is no best either") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.mode = MetricMode::max, .patience = 1});
  CHECK(checks_until_stop(hook, {nan_value, 0.5, 0.75, 0.875}) == 4);
  CHECK_FALSE(hook.stopped_step().has_value());
  CHECK(hook.best() == 0.875);
}

TEST_CASE("EarlyStopping: a NaN later on counts toward the patience like any non-improvement") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 2});
  // 1 best (wait 0); NaN wait 1; NaN wait 2 >= 2: stop at the third check, best still 1.
  CHECK(checks_until_stop(hook, {1.0, nan_value, nan_value, 0.5}) == 3);
  CHECK(hook.stopped_step() == 3);
  CHECK(hook.best() == 1.0);
  CHECK(hook.best_step() == 1);
  // One NaN between improvements costs one check of patience and no more.
  EarlyStoppingHook<ValLoss> once({.patience = 2});
  CHECK(checks_until_stop(once, {1.0, nan_value, 0.5, nan_value, 0.25, nan_value}) == 6);
  CHECK_FALSE(once.stopped_step().has_value());
  CHECK(once.best() == 0.25);
}

TEST_CASE("EarlyStopping: a metric that is always NaN stops after patience checks and says so") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 3});
  CHECK(checks_until_stop(hook, std::vector<double>(6, nan_value)) == 3);
  CHECK(hook.stopped_step() == 3);
  CHECK_FALSE(hook.best().has_value());
  CHECK_FALSE(hook.best_step().has_value());
  CHECK(capture.lines() ==
        std::vector<std::string>{"EarlyStoppingHook: stopping at global step 3: val_loss was "
                                 "NaN or +inf at each of its 3 checks (patience 3), so it has "
                                 "no best."});
  // Keras never stops at its first check, whatever the patience.
  EarlyStoppingHook<ValLoss> impatient({.patience = 0});
  CHECK(checks_until_stop(impatient, {nan_value, nan_value, nan_value}) == 2);
  EarlyStoppingHook<ValLoss> max_mode({.mode = MetricMode::max, .patience = 1});
  CHECK(checks_until_stop(max_mode, {nan_value, -inf_value, nan_value}) == 2);
  CHECK(capture.contains("val_loss was NaN or -inf at each of its 2 checks (patience 1)"));
}

TEST_CASE("EarlyStopping: +inf is no improvement in mode min, a finite value after it is") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 1});
  CHECK(checks_until_stop(hook, {inf_value, 3.0, 2.0}) == 3);
  CHECK_FALSE(hook.stopped_step().has_value());
  CHECK(hook.best() == 2.0);
  // -inf is the best a loss can be: nothing improves on it.
  EarlyStoppingHook<ValLoss> floor({.patience = 1});
  CHECK(checks_until_stop(floor, {-inf_value, 0.0, 0.0}) == 2);
  CHECK(floor.best() == -inf_value);
}

TEST_CASE("EarlyStopping: begin() forgets the best, back to no value at all") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 2});
  CHECK(checks_until_stop(hook, {0.5, 0.25}) == 2);
  CHECK(hook.best() == 0.25);
  // A new session: the old best 0.25 must not make 1.0 a non-improvement.
  CHECK(checks_until_stop(hook, {nan_value, 1.0, 0.75, 0.5}) == 4);
  CHECK_FALSE(hook.stopped_step().has_value());
  CHECK(hook.best() == 0.5);
  CHECK(hook.best_step() == 4);
}

TEST_CASE("EarlyStopping: options are validated") {
  using O = runhooks::EarlyStoppingOptions;
  CHECK_THROWS_WITH_AS((O{.min_delta = -0.1}.validate()),
                       "runhooks: EarlyStoppingOptions::min_delta must be a finite number at least 0, got -0.1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.min_delta = std::numeric_limits<double>::quiet_NaN()}.validate()),
                       doctest::Contains("EarlyStoppingOptions::min_delta"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.patience = -1}.validate()),
                       "runhooks: EarlyStoppingOptions::patience must be at least 0, got -1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.baseline = std::numeric_limits<double>::infinity()}.validate()),
                       doctest::Contains("EarlyStoppingOptions::baseline"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.every_n_iter = 0}.validate()),
                       "runhooks: EarlyStoppingOptions::every_n_iter must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.start_from_check = -3}.validate()),
                       doctest::Contains("start_from_check"), std::invalid_argument);
  CHECK_THROWS_AS(EarlyStoppingHook<ValLoss>({.patience = -1}), std::invalid_argument);
}

// Issue 27: Lightning's thresholds, check_finite and reason, TensorFlow's min_steps. The
// Lightning 2.6.6 sequences are in tests/hooks/keras_lightning_reference.cpp.
TEST_CASE("EarlyStopping: Lightning's order, non-finite before the thresholds before the patience") {
  fakes::LogCapture capture;
  // A NaN with check_finite stops at once, whatever the thresholds say.
  EarlyStoppingHook<ValLoss> finite({.patience = 5, .stopping_threshold = 0.5,
                                     .divergence_threshold = 2.0, .check_finite = true});
  CHECK(checks_until_stop(finite, {1.0, nan_value, 0.25}) == 2);
  CHECK(finite.stop_reason() == runhooks::EarlyStoppingReason::non_finite_metric);
  CHECK(finite.stopped_step() == 2);
  CHECK(finite.best() == 1.0);
  CHECK(finite.wait() == 0);
  CHECK(finite.stop_message() ==
        "EarlyStoppingHook: stopping at global step 2: val_loss = nan is not finite "
        "(check_finite); its best was 1 at global step 1.");
  // A value past both thresholds: the stopping threshold is tested first.
  EarlyStoppingHook<ValLoss> both({.patience = 5, .stopping_threshold = 3.0,
                                   .divergence_threshold = 2.0});
  CHECK(checks_until_stop(both, {2.5}) == 1);
  CHECK(both.stop_reason() == runhooks::EarlyStoppingReason::stopping_threshold);
  CHECK(both.stop_message() == "EarlyStoppingHook: stopping at global step 1: val_loss = 2.5 "
                               "reached the stopping_threshold (< 3).");
  // Equal to a threshold is not past it (Lightning's strict torch.lt / torch.gt).
  EarlyStoppingHook<ValLoss> equal({.patience = 5, .stopping_threshold = 0.5,
                                    .divergence_threshold = 2.0});
  CHECK(checks_until_stop(equal, {0.5, 2.0, 1.0}) == 3);
  CHECK(equal.stop_reason() == runhooks::EarlyStoppingReason::not_stopped);
  EarlyStoppingHook<ValLoss> diverged({.mode = MetricMode::max, .patience = 5,
                                       .divergence_threshold = 0.25});
  CHECK(checks_until_stop(diverged, {0.5, 0.125}) == 2);
  CHECK(diverged.stop_reason() == runhooks::EarlyStoppingReason::divergence_threshold);
  CHECK(diverged.stop_message() == "EarlyStoppingHook: stopping at global step 2: val_loss = "
                                   "0.125 passed the divergence_threshold (< 0.25).");
  // The patience keeps its own reason; begin() clears it.
  EarlyStoppingHook<ValLoss> patient({.patience = 1});
  CHECK(checks_until_stop(patient, {1.0, 2.0}) == 2);
  CHECK(patient.stop_reason() == runhooks::EarlyStoppingReason::patience_exhausted);
  CHECK(checks_until_stop(patient, {1.0}) == 1);
  CHECK(patient.stop_reason() == runhooks::EarlyStoppingReason::not_stopped);
  CHECK(patient.stop_message().empty());
}

TEST_CASE("EarlyStopping: check_finite off, a NaN or inf counts toward the patience; on, +-inf stops") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> off({.patience = 3});
  CHECK(checks_until_stop(off, {1.0, inf_value, -inf_value, 0.5}) == 4);
  CHECK(off.best() == -inf_value);  // -inf improves in min mode, as in Keras and Lightning
  EarlyStoppingHook<ValLoss> on({.patience = 3, .check_finite = true});
  CHECK(checks_until_stop(on, {1.0, -inf_value, 0.5}) == 2);
  CHECK(on.stop_reason() == runhooks::EarlyStoppingReason::non_finite_metric);
  // A first non-finite value: no best to report.
  EarlyStoppingHook<ValLoss> first({.patience = 3, .check_finite = true});
  CHECK(checks_until_stop(first, {nan_value}) == 1);
  CHECK(first.stop_message() == "EarlyStoppingHook: stopping at global step 1: val_loss = nan is "
                                "not finite (check_finite); its best was none yet.");
}

TEST_CASE("EarlyStopping: min_steps, TensorFlow's, skips every check below that global step") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> hook({.patience = 0, .stopping_threshold = 0.5, .min_steps = 3});
  // Steps 1 and 2 are skipped whole: 0.25 does not stop, 9.0 does not become the best.
  CHECK(checks_until_stop(hook, {0.25, 9.0, 2.0, 3.0, 0.0}) == 4);
  CHECK(hook.stopped_step() == 4);
  CHECK(hook.best() == 2.0);
  CHECK(hook.best_step() == 3);
  CHECK(hook.checks() == 4);
}

TEST_CASE("EarlyStopping: the new options are validated") {
  using O = runhooks::EarlyStoppingOptions;
  CHECK_THROWS_WITH_AS((O{.stopping_threshold = nan_value}.validate()),
                       "runhooks: EarlyStoppingOptions::stopping_threshold must be finite, got nan.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.divergence_threshold = -inf_value}.validate()),
                       "runhooks: EarlyStoppingOptions::divergence_threshold must be finite, got -inf.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.min_steps = -2}.validate()),
                       "runhooks: EarlyStoppingOptions::min_steps must be at least 0, got -2.",
                       std::invalid_argument);
  CHECK_THROWS_AS(EarlyStoppingHook<ValLoss>({.stopping_threshold = inf_value}),
                  std::invalid_argument);
}

TEST_CASE("EarlyStopping: state() and restore() give a resumed hook the same decision as a straight run") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValLoss> straight({.patience = 2});
  CHECK(checks_until_stop(straight, {1.0, 0.5, 0.75, 0.75, 0.25}) == 4);
  EarlyStoppingHook<ValLoss> first({.patience = 2});
  CHECK(checks_until_stop(first, {1.0, 0.5, 0.75}) == 3);
  const runhooks::EarlyStoppingState saved = first.state();
  CHECK(saved.best == 0.5);
  CHECK(saved.best_step == 2);
  CHECK(saved.wait == 1);
  EarlyStoppingHook<ValLoss> resumed({.patience = 2});
  runhooks::MonitoredSession session{MetricBackend{{0.75, 0.25}, 3}, std::ref(resumed)};
  resumed.restore(saved);
  session.run();
  CHECK(session.should_stop());
  CHECK(resumed.stopped_step() == 4);
  CHECK(resumed.best_step() == 2);
  CHECK_THROWS_WITH_AS(resumed.restore({0.0, -1, -1, 0}), doctest::Contains("not one this hook wrote"),
                       std::invalid_argument);
}

namespace {
// A metric that declares higher is better (runhooks::DeclaresDirection).
struct ValAccuracy : runhooks::Key<double> {
  static constexpr std::string_view name = "val_accuracy";
  static constexpr MetricMode direction = MetricMode::max;
};
struct AccuracyBackend {
  std::vector<double> values;
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(ValAccuracy) const { return values.at(static_cast<std::size_t>(step - 1)); }
};
}  // namespace

TEST_CASE("EarlyStopping: the mode comes from the key's declared direction; a contradicting one is an error") {
  fakes::LogCapture capture;
  EarlyStoppingHook<ValAccuracy> hook({.patience = 1});
  CHECK(hook.mode() == MetricMode::max);
  CHECK_FALSE(hook.options().mode.has_value());
  runhooks::MonitoredSession session{AccuracyBackend{{0.5, 0.75, 0.875, 0.5}}, std::ref(hook)};
  while (!session.should_stop()) session.run();
  CHECK(hook.best() == 0.875);  // in mode min 0.5 would have been the best, and the stop at run 2
  CHECK(hook.stopped_step() == 4);
  // The same mode, said twice, is fine; the other one is not.
  CHECK(EarlyStoppingHook<ValAccuracy>({.mode = MetricMode::max}).mode() == MetricMode::max);
  CHECK_THROWS_WITH_AS(EarlyStoppingHook<ValAccuracy>({.mode = MetricMode::min}),
                       "runhooks: EarlyStoppingOptions::mode is min, but the key val_accuracy "
                       "declares direction max.",
                       std::invalid_argument);
  // A key without a direction: min unless told.
  CHECK(EarlyStoppingHook<ValLoss>().mode() == MetricMode::min);
  constexpr runhooks::EarlyStoppingOptions agreed{.mode = MetricMode::max};
  static_assert((agreed.validate_for<ValAccuracy>(), true));
}

TEST_CASE("EarlyStopping: a mode tag puts the mode in the type; options.mode must agree with it") {
  fakes::LogCapture capture;
  // A key without a direction: the tag sets the mode, as options.mode would.
  runhooks::EarlyStoppingHook hook{runhooks::keys<ValLoss>, runhooks::maximize, {.patience = 2}};
  static_assert(std::is_same_v<decltype(hook), EarlyStoppingHook<ValLoss, runhooks::Maximize>>);
  CHECK(hook.mode() == MetricMode::max);
  CHECK(hook.options().patience == 2);
  runhooks::MonitoredSession session{MetricBackend{{0.5, 0.75, 0.875, 0.75, 0.875, 0.5, 0.25}},
                                     std::ref(hook)};
  while (!session.should_stop()) session.run();
  CHECK(hook.best() == 0.875);  // as "mode max" above: the stop at the fifth check
  CHECK(hook.stopped_step() == 5);
  // A tag that agrees with the key's direction; a key's direction is no reason to write one.
  runhooks::EarlyStoppingHook agreed{runhooks::keys<ValAccuracy>, runhooks::maximize};
  CHECK(agreed.mode() == MetricMode::max);
  CHECK(EarlyStoppingHook<ValLoss>().mode() == MetricMode::min);
  CHECK(runhooks::EarlyStoppingHook{runhooks::keys<ValLoss>, runhooks::minimize}.mode() ==
        MetricMode::min);
  // options.mode beside a tag: the same is fine, the other is the run-time error (the tag wins
  // nothing silently). The tag against the key: tests/compile_fail/early_stopping_mode_tag_*.
  CHECK(runhooks::EarlyStoppingHook{runhooks::keys<ValLoss>, runhooks::maximize,
                                    {.mode = MetricMode::max}}.mode() == MetricMode::max);
  CHECK_THROWS_WITH_AS((runhooks::EarlyStoppingHook{runhooks::keys<ValLoss>, runhooks::maximize,
                                                    {.mode = MetricMode::min}}),
                       "runhooks: EarlyStoppingOptions::mode is min, but the hook's mode tag is "
                       "runhooks::maximize.",
                       std::invalid_argument);
}
