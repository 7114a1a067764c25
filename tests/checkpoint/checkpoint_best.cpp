// BestCheckpointHook and the manager's ranking (issue 27, item 2): the kept checkpoints against
// the real Lightning 2.6.6 ModelCheckpoint(save_top_k) and Keras 3 ModelCheckpoint(save_best_only,
// initial_value_threshold) (tests/fixtures/keras_lightning_reference), retention as the union of
// the latest and the best, one save per step, the scores in the state file across a restart, and
// a malformed or planted score record.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <runhooks/checkpoint/best_checkpoint_hook.hpp>
#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/training_session.hpp>

#include <fixtures/keras_lightning_reference/fixtures.hpp>
#include <support/checkpoint_backends.hpp>

namespace fs = std::filesystem;
namespace kl = runhooks_test::keras_lightning;
using ckpt::TempDir;
using runhooks::BestCheckpointHook;
using runhooks::BestCheckpointOptions;
using runhooks::CheckpointSaverHook;
using runhooks::CheckpointSaverOptions;

namespace {

struct ValLoss : runhooks::Key<double> {};
struct Accuracy : runhooks::Key<double> {
  static constexpr runhooks::MetricMode direction = runhooks::MetricMode::max;
};

// CheckpointedBackend whose ValLoss (and Accuracy) after step s is values[s - 1].
struct ScoredBackend : ckpt::CheckpointedBackend {
  std::vector<double> values;
  double fetch(ValLoss) const { return values.at(static_cast<std::size_t>(step - 1)); }
  double fetch(Accuracy) const { return values.at(static_cast<std::size_t>(step - 1)); }
};

// A backend saved in the background whose Loss after step s is 10 - s % 4.
struct Loss : runhooks::Key<double> {};
struct CyclingBackend : ckpt::SnapshotBackend {
  double fetch(Loss) const { return 10.0 - static_cast<double>(step % 4); }
};

// Records the steps the saver saved.
struct SavedSteps {
  std::shared_ptr<std::vector<std::int64_t>> steps = std::make_shared<std::vector<std::int64_t>>();
  template <class Session>
  void after_save(Session&, std::int64_t step) {
    steps->push_back(step);
  }
};

std::vector<std::int64_t> best_steps(const std::vector<runhooks::ScoredCheckpoint>& kept) {
  std::vector<std::int64_t> steps;
  for (const auto& c : kept) steps.push_back(c.step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

bool has_files(const fs::path& dir, std::int64_t step) {
  return fs::exists(dir / ("model.ckpt-" + std::to_string(step) + ".arrays"));
}

// Runs values.size() steps under BestCheckpointHook<Key>(options) and a saver that never saves
// on its own (save_steps 1e9, max_to_keep 1: only the creation save, the best, and the end's).
template <class Key>
struct BestRun {
  TempDir dir;
  SavedSteps saved;
  std::vector<runhooks::ScoredCheckpoint> kept;
  std::optional<runhooks::ScoredCheckpoint> best;

  BestRun(std::span<const double> values, BestCheckpointOptions options) {
    ScoredBackend backend;
    backend.values.assign(values.begin(), values.end());
    BestCheckpointHook<Key> hook(options);
    CheckpointSaverHook<runhooks::SteadyClock, SavedSteps> saver(
        CheckpointSaverOptions{.checkpoint_dir = dir.str(), .save_steps = 1000000000,
                               .max_to_keep = 1, .async_save = false},
        saved);
    runhooks::MonitoredSession session(backend, std::ref(hook), std::ref(saver));
    runhooks::link_hooks(session);
    for (std::size_t i = 0; i < values.size(); ++i) session.run();
    kept = hook.best_checkpoints();
    best = hook.best_checkpoint();
    // What the manager committed is what the hook decided.
    CHECK(saver.manager().best_checkpoints() == kept);
    session.close();
  }
};

}  // namespace

TEST_CASE("best checkpoints: Lightning 2.6.6 ModelCheckpoint(save_top_k) sequences") {
  ckpt::CapturedLog quiet;
  for (const kl::LightningTopK& s : kl::lightning_top_k) {
    INFO(s.name);
    BestRun<ValLoss> run(s.values,
                         {.mode = s.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
                          .save_top_k = s.save_top_k});
    // Value i comes after step i + 1. The saver also saved step 0 (creation) and the last step.
    std::vector<std::int64_t> expected_saves{0};
    for (const std::int64_t i : s.saved) expected_saves.push_back(i + 1);
    const auto last = static_cast<std::int64_t>(s.values.size());
    if (expected_saves.back() != last) expected_saves.push_back(last);
    CHECK(*run.saved.steps == expected_saves);
    std::vector<std::int64_t> kept;
    for (const std::int64_t i : s.kept) kept.push_back(i + 1);
    CHECK(best_steps(run.kept) == kept);
    REQUIRE(run.best.has_value() == s.best_index.has_value());
    if (run.best) {
      CHECK(run.best->step == *s.best_index + 1);
      CHECK(run.best->name == (run.dir.path / ("model.ckpt-" + std::to_string(*s.best_index + 1))).string());
      // Lightning stores NaN as the worst infinity; runhooks keeps the NaN it saw.
      const double score = std::isnan(run.best->score)
                               ? (s.max_mode ? -kl::inf : kl::inf)
                               : run.best->score;
      CHECK(score == *s.best_score);
    }
    // Lightning's removed checkpoints are gone from the disk, its kept ones are there.
    for (const std::int64_t i : s.removed) CHECK_MESSAGE(!has_files(run.dir.path, i + 1), "step " << i + 1);
    for (const std::int64_t step : kept) CHECK_MESSAGE(has_files(run.dir.path, step), "step " << step);
  }
}

TEST_CASE("best checkpoints: Keras 3 ModelCheckpoint(save_best_only, initial_value_threshold)") {
  ckpt::CapturedLog quiet;
  for (const kl::KerasSaveBestOnly& s : kl::keras_save_best_only) {
    INFO(s.name);
    BestRun<ValLoss> run(s.values,
                         {.mode = s.max_mode ? runhooks::MetricMode::max : runhooks::MetricMode::min,
                          .save_top_k = 1,
                          .initial_value_threshold = s.initial_value_threshold});
    std::vector<std::int64_t> best_saves;  // the saves for a value: not the creation's nor the end's
    for (const std::int64_t step : *run.saved.steps)
      if (step > 0 && step < static_cast<std::int64_t>(s.values.size())) best_saves.push_back(step);
    const auto last = static_cast<std::int64_t>(s.values.size());
    if (run.best && run.best->step == last) best_saves.push_back(last);
    std::vector<std::int64_t> keras;
    for (const std::int64_t epoch : s.saved) keras.push_back(epoch + 1);
    if (s.differs) {
      // Keras saves a first NaN, then nothing beats it; runhooks ranks NaN worst, as Lightning.
      CHECK(best_saves != keras);
      CHECK(best_saves == std::vector<std::int64_t>{1, 2, 3});
    } else {
      CHECK(best_saves == keras);
    }
  }
}

TEST_CASE("best checkpoints: retention keeps the latest max_to_keep and the best k, their union") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  ScoredBackend backend;
  backend.values = {0.5, 0.25, 0.75, 0.875, 0.625, 1.0, 0.125, 2.0, 3.0};
  BestCheckpointHook<ValLoss> hook({.save_top_k = 2});
  CheckpointSaverHook saver(CheckpointSaverOptions{
      .checkpoint_dir = dir.str(), .save_steps = 2, .max_to_keep = 2, .async_save = false});
  runhooks::MonitoredSession session(backend, std::ref(hook), std::ref(saver));
  runhooks::link_hooks(session);
  for (int i = 0; i < 9; ++i) session.run();
  // Periodic saves at 0, 2, 4, 6, 8; best at 1 (0.5), 2 (0.25), 7 (0.125, displacing 1). Step 2 is
  // both: one save. The latest two (7, 8) and the best two (2, 7).
  CHECK(best_steps(hook.best_checkpoints()) == std::vector<std::int64_t>{2, 7});
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-2", "model.ckpt-7", "model.ckpt-8"});
  CHECK(*backend.saves == 7);  // 0, 1, 2, 4, 6, 7, 8: step 2 saved once
  session.close();  // the end's save at 9
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-2", "model.ckpt-7", "model.ckpt-8", "model.ckpt-9"});
  std::vector<std::string> files;
  for (const std::string& f : ckpt::files_in_but_events(dir.path))
    if (f != "checkpoint") files.push_back(f);
  CHECK(files == std::vector<std::string>{"model.ckpt-2.arrays", "model.ckpt-7.arrays",
                                          "model.ckpt-8.arrays", "model.ckpt-9.arrays"});
  // The state file: TensorFlow's fields, the scores in comment lines it skips.
  const std::string text = ckpt::read_text(dir.path / "checkpoint");
  CHECK(text.find("# runhooks-score: \"model.ckpt-2\", \"ValLoss\", 0.25\n") != std::string::npos);
  CHECK(text.find("# runhooks-score: \"model.ckpt-7\", \"ValLoss\", 0.125\n") != std::string::npos);
  const runhooks::CheckpointState state = runhooks::parse_checkpoint_state(text);
  CHECK(state.model_checkpoint_path == "model.ckpt-9");
  REQUIRE(state.scores.size() == 2);
  CHECK(state.scores[0] == runhooks::CheckpointStateScore{"model.ckpt-2", "ValLoss", 0.25});
}

TEST_CASE("best checkpoints: a restart keeps ranking from the state file") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  // Accuracy (max, from the key's direction) after steps 1-6; the second run restores step 3.
  const std::vector<double> values = {0.5, 0.75, 0.25, 0.5, 0.625, 0.5};
  const auto run = [&](std::int64_t last_step) {
    std::shared_ptr<int> saves;
    BestCheckpointHook<Accuracy> hook({.save_top_k = 2});
    CheckpointSaverHook saver(CheckpointSaverOptions{
        .checkpoint_dir = dir.str(), .save_steps = 1000, .max_to_keep = 1, .async_save = false});
    runhooks::MonitoredSession session(
        runhooks::ChiefSessionCreator(
            [&] {
              ScoredBackend backend;
              backend.values = values;
              saves = backend.saves;
              return backend;
            },
            {.checkpoint_dir = dir.str()}),
        std::ref(hook), std::ref(saver));
    runhooks::link_hooks(session);
    CHECK(hook.mode() == runhooks::MetricMode::max);
    while (session.raw_session().global_step() < last_step) session.run();
    session.close();
    return std::pair(best_steps(hook.best_checkpoints()), *saves);
  };
  CHECK(run(3).first == std::vector<std::int64_t>{1, 2});
  // Restored: 0.5 at step 4 ties the k-th (0.5 at step 1), no save; 0.625 at step 5 displaces it.
  // A fresh ranking would have saved step 4. Saves: the creation's (3), 5, the end's (6).
  const auto [kept, saves] = run(6);
  CHECK(kept == std::vector<std::int64_t>{2, 5});
  CHECK(saves == 3);
  const runhooks::CheckpointState state = *runhooks::read_checkpoint_state(dir.path);
  CHECK(state.scores == std::vector<runhooks::CheckpointStateScore>{
                            {"model.ckpt-2", "Accuracy", 0.75}, {"model.ckpt-5", "Accuracy", 0.625}});
  CHECK(!has_files(dir.path, 1));
  CHECK(!has_files(dir.path, 4));
}

TEST_CASE("best checkpoints: with max_to_keep 0 nothing is deleted and the best stay named") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  runhooks::CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 0});
  manager.rank_by({.monitor = "loss", .save_top_k = 1});
  manager.save(1, 1.0, ckpt::arrays_writer(1), runhooks::DeleteDropped::now, 0.5);
  manager.save(2, 2.0, ckpt::arrays_writer(2), runhooks::DeleteDropped::now, 0.75);
  manager.save(3, 3.0, ckpt::arrays_writer(3));
  CHECK(ckpt::named_checkpoints(dir.path) == std::vector<std::string>{"model.ckpt-1", "model.ckpt-3"});
  for (int step = 1; step <= 3; ++step) CHECK(has_files(dir.path, step));
  REQUIRE(manager.best_checkpoint().has_value());
  CHECK(manager.best_checkpoint()->name == (dir.path / "model.ckpt-1").string());
  CHECK(manager.best_checkpoint()->score == 0.5);
}

TEST_CASE("best checkpoints: malformed or planted score records are errors naming the file") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  const std::string head = "model_checkpoint_path: \"model.ckpt-2\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-1\"\n"
                           "all_model_checkpoint_paths: \"model.ckpt-2\"\n";
  const auto open_with = [&](const std::string& record) {
    ckpt::put_text(dir.path / "checkpoint", record + "\n" + head);
    runhooks::CheckpointManager manager({.checkpoint_dir = dir.path});
    manager.rank_by({.monitor = "val_loss", .save_top_k = 2});
    manager.open(0.0);
    return manager.best_checkpoints();
  };
  const std::string syntax_error =
      "runhooks: checkpoint state file '" + (dir.path / "checkpoint").string() + "', line 1: ";
  // Syntax: the parser's error, with the line.
  for (const char* bad : {"# runhooks-score: \"model.ckpt-1\", \"val_loss\", abc",
                          "# runhooks-score: \"model.ckpt-1\", \"val_loss\"",
                          "# runhooks-score: \"model.ckpt-1\" 0.5",
                          "# runhooks-score: \"model.ckpt-1\", \"val_loss\", 0.5 extra",
                          "# runhooks-score: \"model.ckpt-1\", \"\", 0.5",
                          "# runhooks-score: model.ckpt-1, \"val_loss\", 0.5"}) {
    INFO(bad);
    CHECK_THROWS_WITH_AS(open_with(bad),
                         doctest::Contains(syntax_error.c_str()),
                         runhooks::CheckpointError);
  }
  // Meaning: only a checkpoint of this directory that the state lists, once.
  for (const char* planted : {"# runhooks-score: \"model.ckpt-7\", \"val_loss\", 0.5",
                              "# runhooks-score: \"/etc/model.ckpt-1\", \"val_loss\", 0.5",
                              "# runhooks-score: \"../model.ckpt-1\", \"val_loss\", 0.5",
                              "# runhooks-score: \"other-1\", \"val_loss\", 0.5"}) {
    INFO(planted);
    CHECK_THROWS_WITH_AS(open_with(planted),
                         doctest::Contains("runhooks records scores only for its own checkpoints"),
                         runhooks::CheckpointError);
  }
  CHECK_THROWS_WITH_AS(open_with("# runhooks-score: \"model.ckpt-1\", \"val_loss\", 0.5\n"
                                 "# runhooks-score: \"model.ckpt-1\", \"val_loss\", 0.25"),
                       doctest::Contains("appears twice"), runhooks::CheckpointError);
  // NaN and infinities read back as written.
  const auto kept = open_with("# runhooks-score: \"model.ckpt-1\", \"val_loss\", nan\n"
                              "# runhooks-score: \"model.ckpt-2\", \"val_loss\", -inf");
  REQUIRE(kept.size() == 2);
  CHECK(std::isnan(kept[0].score));
  CHECK(kept[1].score == -std::numeric_limits<double>::infinity());
  // Another metric's scores: kept, unranked, with a warning; its checkpoints are never dropped.
  ckpt::put_text(dir.path / "checkpoint",
                 "# runhooks-score: \"model.ckpt-1\", \"accuracy\", 0.5\n" + head);
  {
    runhooks::CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
    manager.rank_by({.monitor = "val_loss", .save_top_k = 1});
    manager.open(0.0);
    CHECK(manager.best_checkpoints().empty());
    CHECK(quiet.contains("scores model.ckpt-1 (accuracy), not by 'val_loss': they are kept"));
    manager.save(3, 3.0, ckpt::arrays_writer(3));
    CHECK(ckpt::named_checkpoints(dir.path) == std::vector<std::string>{"model.ckpt-1", "model.ckpt-3"});
    CHECK(runhooks::read_checkpoint_state(dir.path)->scores ==
          std::vector<runhooks::CheckpointStateScore>{{"model.ckpt-1", "accuracy", 0.5}});
  }
}

TEST_CASE("best checkpoints: a run restarted with a smaller save_top_k drops the k-th") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  {
    runhooks::CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
    manager.rank_by({.monitor = "loss", .save_top_k = 3});
    for (int step = 1; step <= 3; ++step)
      manager.save(step, step, ckpt::arrays_writer(step), runhooks::DeleteDropped::now, 1.0 / step);
    manager.save(4, 4.0, ckpt::arrays_writer(4));
  }
  runhooks::CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
  manager.rank_by({.monitor = "loss", .save_top_k = 2});
  manager.open(5.0);
  CHECK(best_steps(manager.best_checkpoints()) == std::vector<std::int64_t>{2, 3});
  manager.save(5, 5.0, ckpt::arrays_writer(5));
  CHECK(!has_files(dir.path, 1));
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-2", "model.ckpt-3", "model.ckpt-5"});
}

TEST_CASE("best checkpoints: a metric absent on a run is no check; every_n_iter") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  ScoredBackend backend;
  backend.values = {0.125, 1.0, 0.5, 0.25, 0.0625, 0.75};
  BestCheckpointHook<ValLoss> hook({.save_top_k = 1, .every_n_iter = 3});
  CheckpointSaverHook saver(CheckpointSaverOptions{
      .checkpoint_dir = dir.str(), .save_steps = 1000, .max_to_keep = 1, .async_save = false});
  runhooks::MonitoredSession session(backend, std::ref(hook), std::ref(saver));
  runhooks::link_hooks(session);
  for (int i = 0; i < 6; ++i) session.run();
  // Checks at steps 3 (0.5) and 6 (0.75): 0.125 and 0.0625 were never seen.
  REQUIRE(hook.best_checkpoint().has_value());
  CHECK(hook.best_checkpoint()->step == 3);
  CHECK(hook.best_checkpoint()->score == 0.5);
  session.close();
}

TEST_CASE("best checkpoints: asynchronous saves carry the score") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  CyclingBackend scored;
  BestCheckpointHook<Loss> hook({.save_top_k = 2});
  CheckpointSaverHook saver(CheckpointSaverOptions{
      .checkpoint_dir = dir.str(), .save_steps = 1000, .max_to_keep = 1});
  runhooks::MonitoredSession session(scored, std::ref(hook), std::ref(saver));
  runhooks::link_hooks(session);
  for (int i = 0; i < 8; ++i) session.run();
  session.close();
  // Scores 9, 8, 7, 10, 9, 8, 7, 10 after steps 1-8: 9 and 8 enter; 7 (step 3) displaces 9;
  // 8 at step 6 ties the k-th (8 at step 2), no save; 7 at step 7 displaces it.
  CHECK(best_steps(hook.best_checkpoints()) == std::vector<std::int64_t>{3, 7});
  const runhooks::CheckpointState state = *runhooks::read_checkpoint_state(dir.path);
  CHECK(state.scores == std::vector<runhooks::CheckpointStateScore>{{"model.ckpt-3", "Loss", 7.0},
                                                                   {"model.ckpt-7", "Loss", 7.0}});
  CHECK(!has_files(dir.path, 2));
}

TEST_CASE("best checkpoints: options and linking errors") {
  CHECK_THROWS_WITH_AS(BestCheckpointHook<ValLoss>({.save_top_k = -2}),
                       "runhooks: BestCheckpointOptions::save_top_k must be -1 (all), 0 or more, got -2.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(BestCheckpointHook<ValLoss>({.every_n_iter = 0}),
                       "runhooks: BestCheckpointOptions::every_n_iter must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      BestCheckpointHook<ValLoss>({.initial_value_threshold = std::nan("")}),
      "runhooks: BestCheckpointOptions::initial_value_threshold must not be NaN, got nan.",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(BestCheckpointHook<Accuracy>({.mode = runhooks::MetricMode::min}),
                       "runhooks: BestCheckpointOptions::mode is min, but the key Accuracy declares "
                       "direction max.",
                       std::invalid_argument);
  static_assert((BestCheckpointOptions{.save_top_k = 3}.validate_for<Accuracy>(), true));
  // Never linked: the first check says what to call.
  ckpt::CapturedLog quiet;
  TempDir dir;
  ScoredBackend backend;
  backend.values = {1.0};
  BestCheckpointHook<ValLoss> hook;
  CheckpointSaverHook saver(CheckpointSaverOptions{.checkpoint_dir = dir.str(), .save_steps = 10});
  CHECK_THROWS_WITH_AS(
      runhooks::MonitoredSession(backend, std::ref(hook), std::ref(saver)).run(),
      "runhooks: BestCheckpointHook<ValLoss> is not linked to a CheckpointSaverHook: call "
      "runhooks::link_hooks(session) once the session is made (make_training_session does).",
      std::logic_error);
  // One BestCheckpointHook per saver.
  runhooks::CheckpointManager manager({.checkpoint_dir = dir.path});
  manager.rank_by({.monitor = "a"});
  CHECK_THROWS_AS(manager.rank_by({.monitor = "b"}), std::logic_error);
}

TEST_CASE("best checkpoints: with make_training_session, in chief_only; a worker's does nothing") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  const std::vector<double> values = {0.5, 0.25, 0.75, 0.125};
  const auto factory = [&] {
    ScoredBackend backend;
    backend.values = values;
    return backend;
  };
  {
    auto session = runhooks::make_training_session(
        {.checkpoint_dir = dir.str(), .save_checkpoint_steps = 1000, .stop_on_signals = false},
        factory, runhooks::chief_only(BestCheckpointHook<ValLoss>({.save_top_k = 2})));
    for (int i = 0; i < 4; ++i) session.run();
    auto* hook = session.find_hook<BestCheckpointHook<ValLoss>>();
    REQUIRE(hook != nullptr);
    CHECK(best_steps(hook->best_checkpoints()) == std::vector<std::int64_t>{2, 4});
    REQUIRE(hook->best_checkpoint().has_value());
    CHECK(hook->best_checkpoint()->name == (dir.path / "model.ckpt-4").string());
  }
  CHECK(runhooks::read_checkpoint_state(dir.path)->scores.size() == 2);
  // A worker (Role::runtime, not the chief) restores the chief's step 4; its saver is off, so is
  // the hook: nothing fetched (a fetch past the values would throw), nothing written.
  const std::string state_before = ckpt::read_text(dir.path / "checkpoint");
  auto worker = runhooks::make_training_session(
      {.is_chief = false, .checkpoint_dir = dir.str(), .stop_on_signals = false}, factory,
      runhooks::chief_only(BestCheckpointHook<ValLoss>()));
  for (int i = 0; i < 3; ++i) worker.run();
  CHECK(worker.raw_session().global_step() == 7);
  CHECK(ckpt::read_text(dir.path / "checkpoint") == state_before);
}

TEST_CASE("best checkpoints: a saver in runhooks::Conditional, on and off") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  using Saver = CheckpointSaverHook<>;
  for (const bool on : {true, false}) {
    INFO("saver on: " << on);
    ScoredBackend backend;
    if (on) backend.values = {0.5, 0.25, 0.75};  // off: a fetch would throw std::out_of_range
    runhooks::Conditional<Saver> saver(
        on ? std::optional<Saver>(std::in_place,
                                  CheckpointSaverOptions{.checkpoint_dir = dir.str(), .save_steps = 1000})
           : std::nullopt);
    runhooks::MonitoredSession session(backend, BestCheckpointHook<ValLoss>({.save_top_k = 1}),
                                       std::move(saver));
    runhooks::link_hooks(session);
    for (int i = 0; i < 3; ++i) session.run();
    const auto best = session.hook<0>().best_checkpoint();
    CHECK(best.has_value() == on);
    if (best) CHECK(best->step == 2);
    session.close();
  }
}

TEST_CASE("best checkpoints: a mode tag puts the mode in the type; options.mode must agree with it") {
  ckpt::CapturedLog quiet;
  TempDir dir;
  ScoredBackend backend;
  backend.values = {0.5, 0.75, 0.25};
  // ValLoss declares no direction: the tag makes higher better, as options.mode = max would.
  BestCheckpointHook hook{runhooks::keys<ValLoss>, runhooks::maximize, {.save_top_k = 1}};
  static_assert(std::is_same_v<decltype(hook), BestCheckpointHook<ValLoss, runhooks::Maximize>>);
  CHECK(hook.mode() == runhooks::MetricMode::max);
  CheckpointSaverHook saver(CheckpointSaverOptions{
      .checkpoint_dir = dir.str(), .save_steps = 1000, .max_to_keep = 1, .async_save = false});
  runhooks::MonitoredSession session(backend, std::ref(hook), std::ref(saver));
  runhooks::link_hooks(session);
  for (int i = 0; i < 3; ++i) session.run();
  REQUIRE(hook.best_checkpoint().has_value());
  CHECK(hook.best_checkpoint()->score == 0.75);  // in mode min: 0.25 at step 3
  CHECK(best_steps(hook.best_checkpoints()) == std::vector<std::int64_t>{2});
  session.close();
  CHECK(BestCheckpointHook{runhooks::keys<Accuracy>, runhooks::maximize}.mode() ==
        runhooks::MetricMode::max);
  CHECK_THROWS_WITH_AS((BestCheckpointHook{runhooks::keys<ValLoss>, runhooks::maximize,
                                           {.mode = runhooks::MetricMode::min}}),
                       "runhooks: BestCheckpointOptions::mode is min, but the hook's mode tag is "
                       "runhooks::maximize.",
                       std::invalid_argument);
}
