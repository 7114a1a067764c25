// EvaluationHook: TensorFlow's InMemoryEvaluatorHook schedule (at start, every N steps, at the
// end) by steps and by seconds, the keys it produces read at the same step by the hooks declared
// after it (EarlyStoppingHook, ReduceLROnPlateauHook) and by no hook on the other steps, the eval
// event file read back, its options' errors, and what a NaN metric and a throwing evaluator do.

#include <runhooks/error.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/training_session/chief_only.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/fakes.hpp"
#include "support/hook_test_support.hpp"

namespace {

using runhooks::EvaluationHook;
using runhooks::EvaluationOptions;
using runhooks::KeyValues;
using runhooks::ManualClock;

// Named "loss", as the training loss: TensorBoard draws both on one chart, one run each.
struct ValLoss : runhooks::Key<double> {
  static constexpr std::string_view name = "loss";
};
struct ValAccuracy : runhooks::Key<float> {};
struct Loss : runhooks::Key<double> {};

struct Trainer {
  std::int64_t step = 0;
  double rate = 0.1;
  ManualClock clock{};
  void run() {
    ++step;
    clock.advance(1.0);
  }
  std::int64_t global_step() const { return step; }
  double fetch(Loss) const { return 2.0; }
  double learning_rate() const { return rate; }
  void set_learning_rate(double r) { rate = r; }
};

// The evaluator: records the global step of each call, and returns values[k] at the k-th call
// (the last one again after the end of the list).
struct Evaluator {
  std::vector<std::int64_t>* steps;
  std::vector<double> losses = {0.5};
  KeyValues<ValLoss, ValAccuracy> operator()(Trainer& trainer) const {
    const std::size_t k = steps->size();
    steps->push_back(trainer.step);
    const double loss = losses[k < losses.size() ? k : losses.size() - 1];
    return KeyValues<ValLoss, ValAccuracy>(loss, 0.25f * static_cast<float>(k));
  }
};

// Records, at each step, whether the keys came.
struct Probe {
  std::vector<std::int64_t>* seen;
  auto before_run(auto&) {
    return runhooks::SessionRunArgs{runhooks::fetch<ValLoss>(), runhooks::fetch<ValAccuracy>()};
  }
  void after_run(auto& run_context, const auto& run_values) {
    CHECK(run_values[ValLoss{}].has_value() == run_values[ValAccuracy{}].has_value());
    if (run_values[ValLoss{}]) seen->push_back(run_context.global_step());
  }
};

struct LossEvaluator {
  KeyValues<Loss> operator()(Trainer&) const { return KeyValues<Loss>(0.5); }
};
// Records Loss at each step, -1 where it did not come.
struct Reader {
  std::vector<double>* values;
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::fetch<Loss>()}; }
  void after_run(auto&, const auto& run_values) {
    values->push_back(run_values[Loss{}] ? *run_values[Loss{}] : -1.0);
  }
};

// Loses the backend (AbortedError) once, before the run from global step 5.
struct AbortAtFive {
  bool* aborted;
  void before_run(auto& run_context) {
    if (!*aborted && run_context.session().step == 5) {
      *aborted = true;
      throw runhooks::AbortedError("lost the backend");
    }
  }
};

std::vector<std::filesystem::path> event_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().starts_with("events.out.tfevents."))
      files.push_back(entry.path());
  return files;
}

}  // namespace

TEST_CASE("EvaluationHook: TensorFlow's schedule: at start, every N steps, at the end") {
  // TensorFlow's InMemoryEvaluatorHook (estimator hooks/hooks.py) with every_n_iter=4 over 10
  // steps: one evaluation in after_create_session, two when its SecondOrStepTimer triggers (4,
  // 8) and one in end(): 4 calls. Derived from its code (no fixture: TensorFlow Estimator is not
  // among the generators' libraries).
  std::vector<std::int64_t> steps;
  {
    runhooks::MonitoredSession session{
        Trainer{}, EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                                  {.every_n_steps = 4, .log = false}}};
    CHECK(steps == std::vector<std::int64_t>{0});
    for (int i = 0; i < 10; ++i) session.run();
    CHECK(steps == std::vector<std::int64_t>{0, 4, 8});
    session.close();
  }
  CHECK(steps == std::vector<std::int64_t>{0, 4, 8, 10});

  // Closed right after an evaluation: end() does not evaluate the same step again (TensorFlow
  // does); without at_start and at_end, only the timer.
  steps.clear();
  {
    runhooks::MonitoredSession session{
        Trainer{}, EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                                  {.every_n_steps = 4, .log = false}}};
    for (int i = 0; i < 8; ++i) session.run();
    session.close();
  }
  CHECK(steps == std::vector<std::int64_t>{0, 4, 8});
  steps.clear();
  {
    runhooks::MonitoredSession session{
        Trainer{}, EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                                  {.every_n_steps = 3, .at_start = false, .at_end = false,
                                   .log = false}}};
    for (int i = 0; i < 10; ++i) session.run();
    session.close();
  }
  CHECK(steps == std::vector<std::int64_t>{3, 6, 9});
}

TEST_CASE("EvaluationHook: every_n_secs, on the session's clock") {
  // One step per second: SecondOrStepTimer triggers once 2.5 s passed since the last evaluation.
  std::vector<std::int64_t> steps;
  Trainer trainer;
  ManualClock clock = trainer.clock;
  runhooks::MonitoredSession session{
      std::move(trainer),
      EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                     {.every_n_secs = 2.5, .at_end = false, .log = false}, clock}};
  for (int i = 0; i < 10; ++i) session.run();
  CHECK(steps == std::vector<std::int64_t>{0, 3, 6, 9});
}

TEST_CASE("EvaluationHook: at_end on the step a hook before it stops, seen by the hooks after it") {
  std::vector<std::int64_t> steps;
  std::vector<std::int64_t> seen;
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::StopAtStepHook({.last_step = 7}),
      EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                     {.every_n_steps = 5, .log = false}},
      Probe{&seen}};
  while (!session.should_stop()) session.run();
  session.close();
  CHECK(steps == std::vector<std::int64_t>{0, 5, 7});
  CHECK(seen == std::vector<std::int64_t>{5, 7});  // the evaluation at start produces nothing
}

TEST_CASE("EvaluationHook: EarlyStoppingHook and ReduceLROnPlateauHook act at the evaluation step") {
  // Evaluations at 0 (not produced), 3, 6, 9, 12: 0.9 and 0.8 improve, 0.85 and 0.87 do not.
  std::vector<std::int64_t> steps;
  std::vector<std::int64_t> seen;
  runhooks::EarlyStoppingHook<ValLoss> stopping({.patience = 2});
  runhooks::ReduceLROnPlateauHook<ValLoss> plateau({.factor = 0.5, .patience = 1});
  runhooks::MonitoredSession session{
      Trainer{},
      EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>,
                     Evaluator{&steps, {1.0, 0.9, 0.8, 0.85, 0.87, 0.1}},
                     {.every_n_steps = 3, .log = false}},
      std::ref(stopping), std::ref(plateau), Probe{&seen}};
  fakes::LogCapture log;
  while (!session.should_stop()) session.run();
  CHECK(session.raw_session().step == 12);
  CHECK(steps == std::vector<std::int64_t>{0, 3, 6, 9, 12});
  CHECK(seen == std::vector<std::int64_t>{3, 6, 9, 12});
  CHECK(stopping.checks() == 4);
  CHECK(stopping.stopped_step() == 12);
  REQUIRE(stopping.best().has_value());
  CHECK(*stopping.best() == 0.8);
  CHECK(stopping.best_step() == 6);
  // Keras' plateau, patience 1: 0.85 at 9 and 0.87 at 12 each reduce 0.1 by half.
  CHECK(plateau.checks() == 4);
  CHECK(plateau.reductions() == 2);
  CHECK(session.raw_session().rate == doctest::Approx(0.025));
  session.close();
  CHECK(steps.size() == 5);  // the stop's step was evaluated already: end() adds none
}

TEST_CASE("EvaluationHook: in a Conditional (make_training_session's chief_only), its keys still reach the hooks after it") {
  std::vector<std::int64_t> steps;
  std::vector<std::int64_t> seen;
  using Hook = EvaluationHook<Evaluator, runhooks::SteadyClock, ValLoss, ValAccuracy>;
  Hook hook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps}, {.every_n_steps = 2, .log = false}};
  {
    runhooks::MonitoredSession session{Trainer{}, runhooks::Conditional<Hook>(hook), Probe{&seen}};
    for (int i = 0; i < 4; ++i) session.run();
  }
  CHECK(seen == std::vector<std::int64_t>{2, 4});
  // Off (a worker's chief-only hook): it never evaluates, and the hooks after it see nothing.
  steps.clear();
  seen.clear();
  {
    runhooks::MonitoredSession session{Trainer{}, runhooks::Conditional<Hook>(std::nullopt),
                                       Probe{&seen}};
    for (int i = 0; i < 4; ++i) session.run();
  }
  CHECK(steps.empty());
  CHECK(seen.empty());
}

TEST_CASE("EvaluationHook: a produced key replaces the backend's for the hooks after it only") {
  // Trainer offers Loss (2.0); the hook produces it too (0.5 at its evaluations).
  std::vector<double> before;
  std::vector<double> after;
  fakes::LogCapture log;
  Trainer trainer;
  ManualClock clock = trainer.clock;
  {
    runhooks::MonitoredSession session{
        std::move(trainer), Reader{&before},
        EvaluationHook{runhooks::keys<Loss>, LossEvaluator{},
                       {.every_n_steps = 2, .at_end = false, .log = false}},
        Reader{&after},
        // A key missing on a logging step: nothing is logged until it comes.
        runhooks::LoggingTensorHook{runhooks::keys<Loss>, {.every_n_iter = 1}, clock}};
    for (int i = 0; i < 4; ++i) session.run();
  }
  CHECK(before == std::vector<double>{2.0, 2.0, 2.0, 2.0});
  CHECK(after == std::vector<double>{-1.0, 0.5, -1.0, 0.5});
  CHECK(log.lines() == std::vector<std::string>{"Loss = 0.5", "Loss = 0.5 (2.000 sec)"});
}

TEST_CASE("EvaluationHook: the log line, the eval event file and last()") {
  hook_test::TempDir dir;
  std::vector<std::int64_t> steps;
  fakes::LogCapture log;
  {
    runhooks::MonitoredSession session{
        Trainer{}, EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>,
                                  Evaluator{&steps, {0.5, std::nan(""), 0.25}},
                                  {.every_n_steps = 2, .output_dir = dir.path().string()}}};
    auto& hook = session.template hook<0>();
    REQUIRE(hook.last().has_value());
    CHECK(hook.last()->step == 0);
    for (int i = 0; i < 5; ++i) session.run();
    CHECK(hook.last()->step == 4);
    CHECK(hook.last()->values[ValLoss{}] == 0.25);
    CHECK(hook.last()->values[ValAccuracy{}] == 0.5f);
    session.close();
    CHECK(hook.evaluations() == 4);
    CHECK(hook.eval_dir() == dir.path() / "eval");
  }
  // NaN is logged and written as it is.
  CHECK(log.lines() ==
        std::vector<std::string>{"eval at step 0: loss = 0.5, ValAccuracy = 0",
                                 "eval at step 2: loss = nan, ValAccuracy = 0.25",
                                 "eval at step 4: loss = 0.25, ValAccuracy = 0.5",
                                 "eval at step 5: loss = 0.25, ValAccuracy = 0.75"});
  CHECK(std::filesystem::is_empty(dir.path()) == false);
  const auto files = event_files(dir.path() / "eval");
  REQUIRE(files.size() == 1);
  CHECK(event_files(dir.path()).empty());  // the training run's directory holds nothing
  const std::vector<runhooks::Event> events = runhooks::read_event_file(files[0]);
  // The file's version, START at step 0, then two scalars per evaluation.
  REQUIRE(events.size() == 2 + 2 * 4);
  CHECK(events[1].step == 0);
  CHECK(events[1].session_log ==
        runhooks::SessionLog{runhooks::SessionLog::Status::start, "", ""});
  const std::int64_t want_steps[] = {0, 0, 2, 2, 4, 4, 5, 5};
  const char* want_tags[] = {"loss", "ValAccuracy", "loss", "ValAccuracy",
                             "loss", "ValAccuracy", "loss", "ValAccuracy"};
  for (std::size_t i = 0; i < 8; ++i) {
    const runhooks::Event& event = events[2 + i];
    CHECK(event.step == want_steps[i]);
    REQUIRE(event.summary.size() == 1);
    CHECK(event.summary[0].tag == want_tags[i]);
    REQUIRE(event.summary[0].simple_value.has_value());
  }
  CHECK(std::isnan(*events[4].summary[0].simple_value));
  CHECK(*events[5].summary[0].simple_value == 0.25f);
  CHECK(*events[6].summary[0].simple_value == 0.25f);
}

TEST_CASE("EvaluationHook: a re-created session evaluates unless its step was just evaluated") {
  std::vector<std::int64_t> steps;
  EvaluationHook hook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                      {.every_n_steps = 10, .log = false}};
  Trainer trainer;
  hook.begin();
  trainer.step = 20;
  hook.after_create_session(trainer);  // a first session, restored at 20
  hook.after_create_session(trainer);  // recovered, restored at 20 again: nothing new to see
  trainer.step = 10;
  hook.after_create_session(trainer);  // recovered to an earlier checkpoint
  CHECK(steps == std::vector<std::int64_t>{20, 10});
  hook.begin();  // another session, at the same step: a new start
  hook.after_create_session(trainer);
  CHECK(steps == std::vector<std::int64_t>{20, 10, 10});
}

TEST_CASE("EvaluationHook: a recovery to an earlier checkpoint evaluates the restored model first") {
  std::vector<std::int64_t> steps;
  bool aborted = false;
  auto creator = [&] {
    Trainer trainer;
    trainer.step = aborted ? 3 : 0;  // the new backend restored a checkpoint of step 3
    return trainer;
  };
  runhooks::MonitoredSession session{
      creator, AbortAtFive{&aborted},
      EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                     {.every_n_steps = 2, .at_end = false, .log = false}}};
  while (session.raw_session().step < 7) session.run();
  CHECK(aborted);
  // 0, 2, 4 on the first backend; 3 on re-creation, then every 2 steps from there.
  CHECK(steps == std::vector<std::int64_t>{0, 2, 4, 3, 5, 7});
}

TEST_CASE("EvaluationHook: an evaluator that throws propagates from run()") {
  struct Throwing {
    KeyValues<ValLoss> operator()(Trainer& trainer) const {
      if (trainer.step == 2) throw std::runtime_error("evaluation input missing");
      return KeyValues<ValLoss>(1.0);
    }
  };
  runhooks::MonitoredSession session{
      Trainer{}, EvaluationHook{runhooks::keys<ValLoss>, Throwing{},
                                {.every_n_steps = 2, .at_end = false, .log = false}}};
  session.run();
  CHECK_THROWS_WITH_AS(session.run(), "evaluation input missing", std::runtime_error);
}

TEST_CASE("EvaluationOptions: each mistake names the option and value") {
  auto message = [](EvaluationOptions options) {
    try {
      options.validate();
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  CHECK(message({.every_n_steps = 10, .every_n_secs = 5.0}) ==
        "Can not provide both every_secs and every_steps: EvaluationOptions sets both "
        "every_n_steps=10 and every_n_secs=5; set one.");
  CHECK(message({}) ==
        "Either every_secs or every_steps should be provided: set "
        "EvaluationOptions::every_n_steps or every_n_secs.");
  CHECK(message({.every_n_steps = 0}) ==
        "runhooks: EvaluationOptions::every_n_steps must be at least 1, got 0.");
  CHECK(message({.every_n_secs = std::numeric_limits<double>::quiet_NaN()}).find(
            "EvaluationOptions::every_n_secs must be a number of seconds greater than 0") !=
        std::string::npos);
  CHECK(message({.every_n_secs = -1.0}).find(", got -1.") != std::string::npos);
  static_assert((EvaluationOptions{.every_n_steps = 100}.validate(), true));
  std::vector<std::int64_t> steps;
  CHECK_THROWS_AS((EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, Evaluator{&steps},
                                  {.every_n_steps = -3}}),
                  std::invalid_argument);
}
