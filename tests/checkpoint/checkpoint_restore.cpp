// ChiefSessionCreator: the latest checkpoint restored at the start and on every recovery, an
// explicit checkpoint_filename_with_path, and every way a restore can fail (a clear error naming
// the file; start_fresh is the explicit way to start over). TensorFlow's numbers from
// tf-semantics.md §3: F33, F36, F37 (MonitoredSessionTest) and I80-I83, I85
// (MonitoredTrainingSessionTest, whose checkpoint_dir means a ChiefSessionCreator plus a
// CheckpointSaverHook; save_checkpoint_secs defaults to 600).
// Not ported: I84 and I86 (summaries and graph defs: no checkpoint in them), I87 (the distribute
// coordinator: its should_checkpoint True/False cases are I81 and I85 here), I88 (LoggingTensorHook).
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <support/checkpoint_backends.hpp>

using ckpt::CheckpointedBackend;
using ckpt::TempDir;
using fakes::do_step;
using fakes::read_gstep;
using runhooks::CheckpointError;
using runhooks::CheckpointSaverHook;
using runhooks::ChiefSessionCreator;

namespace {

auto fresh() { return CheckpointedBackend{}; }

// TF's MonitoredTrainingSession(checkpoint_dir=dir, save_checkpoint_secs=secs or 600,
// save_checkpoint_steps=steps): a ChiefSessionCreator and a CheckpointSaverHook on the same dir.
template <class... Hooks>
auto training_session(const TempDir& dir, std::optional<std::int64_t> steps,
                      std::optional<double> secs, runhooks::ManualClock clock, Hooks... hooks) {
  if (!steps && !secs) secs = 600.0;
  return std::make_unique<runhooks::MonitoredSession<
      ChiefSessionCreator<decltype(&fresh)>,
      CheckpointSaverHook<runhooks::ManualClock>, Hooks...>>(
      ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()}),
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = steps, .save_secs = secs},
                          clock),
      std::move(hooks)...);
}

std::int64_t restored_step(const TempDir& dir) {
  runhooks::MonitoredSession session{ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()})};
  return read_gstep(session);
}

struct QuietLog {
  ckpt::CapturedLog log;
};

// The global step of every backend the session made, after its restore.
struct Restored {
  std::vector<std::int64_t>* steps;
  template <class B>
  void after_create_session(B& backend) {
    steps->push_back(backend.global_step());
  }
};

}  // namespace

TEST_CASE("F33 test_recovery: a new session restores the latest checkpoint, or the one named") {
  QuietLog quiet;
  TempDir dir;
  {
    runhooks::MonitoredSession session{
        ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()}),
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
    CHECK(read_gstep(session) == 0);
    CHECK(do_step(session) == 1);
    CHECK(do_step(session) == 2);
  }
  // A new session on the same directory reads 2.
  CHECK(restored_step(dir) == 2);
  // And one given checkpoint_filename_with_path=latest_checkpoint(logdir).
  const std::string latest = runhooks::latest_checkpoint(dir.path)->string();
  runhooks::MonitoredSession session{
      ChiefSessionCreator(&fresh, {.checkpoint_filename_with_path = latest})};
  CHECK(read_gstep(session) == 2);
  CHECK(session.raw_session().global_step() == 2);
}

TEST_CASE_TEMPLATE("F35/F36 test_retry_on_aborted_error / test_retry_on_unavailable_error with an empty checkpoint_dir",
                   Error, runhooks::AbortedError, runhooks::UnavailableError) {
  // Nothing saved: the re-created backend starts from scratch again, as in TensorFlow.
  QuietLog quiet;
  TempDir dir;
  fakes::RaiseOnceAtCountN hook(4, Error("Abort"));
  runhooks::MonitoredSession session{ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()}),
                                     std::ref(hook)};
  CHECK(read_gstep(session) == 0);
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 2);
  CHECK_FALSE(session.should_stop());
  CHECK(do_step(session) == 1);
  CHECK(hook.raised);
  CHECK(do_step(session) == 2);
  CHECK_FALSE(session.should_stop());
}

TEST_CASE("F37 test_recover_and_retry_on_aborted_error: the replayed step continues from the checkpoint") {
  QuietLog quiet;
  TempDir dir;
  fakes::RaiseOnceAtCountN hook(4, runhooks::AbortedError("Abort"));
  auto creator = ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()});
  runhooks::MonitoredSession session{creator, std::ref(hook),
                                     CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
  CHECK(read_gstep(session) == 0);
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 2);
  CHECK_FALSE(session.should_stop());
  // The 4th run raises; the session recovers from the checkpoint at 2 and the replay gives 3.
  CHECK(do_step(session) == 3);
  CHECK_FALSE(session.should_stop());
  CHECK(hook.raised);
  CHECK(do_step(session) == 4);
  CHECK_FALSE(session.should_stop());
  CHECK(*session.raw_session().restores == 1);
}

TEST_CASE("restore on every recovery: each re-created backend restores the then-latest checkpoint") {
  QuietLog quiet;
  TempDir dir;
  int created = 0;
  std::vector<std::int64_t> restored;
  auto make = [&] {
    CheckpointedBackend backend;
    ++created;
    backend.throw_at(3, runhooks::AbortedError("preempted"));  // every backend dies at its 3rd run
    return backend;
  };
  runhooks::MonitoredSession session{ChiefSessionCreator(make, {.checkpoint_dir = dir.str()}),
                                     Restored{&restored},
                                     CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
  for (int i = 0; i < 7; ++i) do_step(session);
  // Backends: 1 runs 1, 2 then dies; 2 restores 2, runs 3, 4, dies; 3 restores 4, runs 5, 6, dies;
  // 4 restores 6, runs 7.
  CHECK(session.raw_session().global_step() == 7);
  CHECK(created == 4);
  CHECK(restored == std::vector<std::int64_t>{0, 2, 4, 6});
}

TEST_CASE("I80 test_saving_restoring_checkpoint: with save_checkpoint_secs=600, saved at creation and at end") {
  QuietLog quiet;
  TempDir dir;
  {
    auto session = training_session(dir, std::nullopt, std::nullopt, runhooks::ManualClock(0.0));
    CHECK(read_gstep(*session) == 0);
    CHECK(do_step(*session) == 1);
    CHECK(do_step(*session) == 2);
  }
  CHECK(restored_step(dir) == 2);
}

TEST_CASE("I81 test_save_checkpoint_steps: save_checkpoint_steps=100, 100 steps") {
  QuietLog quiet;
  TempDir dir;
  {
    auto session = training_session(dir, 100, std::nullopt, runhooks::ManualClock(0.0));
    for (int i = 0; i < 100; ++i) do_step(*session);
  }
  CHECK(restored_step(dir) == 100);
}

TEST_CASE("I82 test_save_checkpoint_secs: 0.1 s, 1 step, 0.2 s sleep, 10 steps") {
  QuietLog quiet;
  TempDir dir;
  runhooks::ManualClock clock(1000.0);
  {
    auto session = training_session(dir, std::nullopt, 0.1, clock);
    do_step(*session);
    clock.advance(0.2);
    for (int i = 0; i < 10; ++i) do_step(*session);
  }
  CHECK(restored_step(dir) == 11);
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-0", "model.ckpt-2", "model.ckpt-11"});
}

TEST_CASE("I83 test_save_restore_checkpoint_v1_saved_model: w_add gives 6, 7, then 8 after a restart") {
  // The variable w starts at 5 (TensorFlow loads it from a SavedModel); each run adds 1.
  QuietLog quiet;
  TempDir dir;
  auto make = [] {
    CheckpointedBackend backend;
    backend.var = 5.0;
    return backend;
  };
  auto w_add = [](auto& session) {
    return *session.run(runhooks::SessionRunArgs{runhooks::fetch<fakes::Var>(),
                                                 runhooks::feed<fakes::CallerAdd>(1.0)})[fakes::Var{}];
  };
  {
    runhooks::MonitoredSession session{
        ChiefSessionCreator(make, {.checkpoint_dir = dir.str()}),
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_secs = 600.0})};
    CHECK(w_add(session) == 6.0);
    CHECK(w_add(session) == 7.0);
  }
  runhooks::MonitoredSession session{ChiefSessionCreator(make, {.checkpoint_dir = dir.str()})};
  CHECK(w_add(session) == 8.0);
}

TEST_CASE("I85 test_custom_saving: save_checkpoint_secs=0 adds no saver, so a restart reads 0") {
  QuietLog quiet;
  TempDir dir;
  fakes::FakeHook<> fake_hook;
  {
    runhooks::MonitoredSession session{ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()}),
                                       std::ref(fake_hook)};
    CHECK(read_gstep(session) == 0);
    CHECK(do_step(session) == 1);
    CHECK(do_step(session) == 2);
  }
  CHECK(fake_hook.call_counter.begin == 1);
  CHECK(restored_step(dir) == 0);
}

TEST_CASE("a missing checkpoint directory means nothing to restore") {
  QuietLog quiet;
  TempDir dir;
  runhooks::MonitoredSession session{
      ChiefSessionCreator(&fresh, {.checkpoint_dir = (dir / "not yet").string()})};
  CHECK(read_gstep(session) == 0);
}

TEST_CASE("both checkpoint_dir and checkpoint_filename_with_path: TensorFlow's error") {
  CHECK_THROWS_WITH_AS(
      ChiefSessionCreator(&fresh, {.checkpoint_dir = "a", .checkpoint_filename_with_path = "a/b"}),
      "Can not provide both checkpoint_dir and checkpoint_filename_with_path. "
      "(ChiefSessionOptions: checkpoint_dir = 'a', checkpoint_filename_with_path = 'a/b')",
      std::invalid_argument);
}

TEST_CASE("a checkpoint_filename_with_path that does not exist is an error naming it") {
  QuietLog quiet;
  TempDir dir;
  const std::string missing = (dir / "model.ckpt-7").string();
  CHECK_THROWS_WITH_AS(
      runhooks::MonitoredSession(ChiefSessionCreator(&fresh, {.checkpoint_filename_with_path = missing})),
      ("runhooks: ChiefSessionOptions::checkpoint_filename_with_path '" + missing +
       "' names no checkpoint: no file starts with it.")
          .c_str(),
      CheckpointError);
}

TEST_CASE("restore failures are errors naming the file; start_fresh starts over explicitly") {
  QuietLog quiet;
  TempDir dir;
  {
    runhooks::MonitoredSession session{
        ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()}),
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
    do_step(session);
    do_step(session);
  }
  const std::filesystem::path file = dir / "model.ckpt-2.arrays";
  auto open_session = [&] {
    runhooks::MonitoredSession session{ChiefSessionCreator(&fresh, {.checkpoint_dir = dir.str()})};
    return read_gstep(session);
  };

  SUBCASE("the state file names a checkpoint whose files are gone") {
    std::filesystem::remove(file);
    CHECK_THROWS_WITH_AS(open_session(),
                         ("runhooks: checkpoint state file '" + (dir / "checkpoint").string() +
                          "' names checkpoint '" + (dir / "model.ckpt-2").string() +
                          "', but none of its files exists.")
                             .c_str(),
                         CheckpointError);
  }
  SUBCASE("a checkpoint file fails its checksum") {
    std::string bytes = ckpt::read_text(file);
    bytes[bytes.find("var") + 3] ^= 1;  // the first byte of var's value
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    CHECK_THROWS_WITH_AS(open_session(),
                         ("runhooks: restoring checkpoint '" + (dir / "model.ckpt-2").string() +
                          "' failed: runhooks: checkpoint file '" + file.string() +
                          "': array 'var' fails its checksum. (ChiefSessionOptions::start_fresh "
                          "starts from scratch instead.)")
                             .c_str(),
                         CheckpointError);
  }
  SUBCASE("a torn checkpoint file") {
    const std::string bytes = ckpt::read_text(file);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
    CHECK_THROWS_WITH_AS(open_session(), doctest::Contains("truncated or torn"), CheckpointError);
  }
  SUBCASE("a damaged state file") {
    std::ofstream(dir / "checkpoint", std::ios::trunc) << "model_checkpoint_path: \"model.ck";
    CHECK_THROWS_WITH_AS(open_session(), doctest::Contains("line 1: unterminated string"),
                         CheckpointError);
  }
  SUBCASE("start_fresh: the first backend starts from scratch, the saver's next save is the latest") {
    std::filesystem::remove(file);
    bool lost = false;
    auto make = [&] {
      CheckpointedBackend backend;
      if (!lost) backend.throw_at(4, runhooks::AbortedError("preempted"));
      lost = true;
      return backend;
    };
    runhooks::MonitoredSession session{
        ChiefSessionCreator(make, {.checkpoint_dir = dir.str(), .start_fresh = true}),
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
    CHECK(read_gstep(session) == 0);
    CHECK(do_step(session) == 1);
    CHECK(do_step(session) == 2);  // saved: model.ckpt-2 again, now the latest
    // The next backend (a recovery) restores the latest checkpoint: start_fresh was for the first.
    CHECK(do_step(session) == 3);
    CHECK(*session.raw_session().restores == 1);
    CHECK(session.raw_session().global_step() == 3);
  }
  SUBCASE("a restore failing on recovery is raised by run(), not retried") {
    bool lost = false;
    auto make = [&] {
      CheckpointedBackend backend;
      if (!lost) backend.throw_at(2, runhooks::AbortedError("preempted"));
      lost = true;
      return backend;
    };
    runhooks::MonitoredSession session{ChiefSessionCreator(make, {.checkpoint_dir = dir.str()})};
    CHECK(do_step(session) == 3);
    std::filesystem::remove(file);
    CHECK_THROWS_AS(do_step(session), CheckpointError);
  }
}
