// CheckpointSaverHook: TensorFlow's CheckpointSaverHookTest, CheckpointSaverHookMultiStepTest and
// ResourceCheckpointSaverHookTest (tf-semantics.md §3, test 89) with TensorFlow's numbers, plus the
// options' errors, listeners' diagnostics at run time, and the per-step check.
//
// TensorFlow's tests drive the hook through _HookedSession after calling begin() (and sometimes
// after_create_session()) by hand; `Hooked` below does the same: a run is the backend's step and
// the hook's after_run. `load_variable(model_dir, global_step)` is ckpt::latest_step(dir).
// Not ported: test_raise_when_saver_and_scaffold_both_present and the Scaffold/saver cases (there
// is no graph or Saver object: the backend saves itself), test_summary_writer_defs and
// save_graph_def (no graph to write).
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <support/checkpoint_backends.hpp>

using ckpt::CheckpointedBackend;
using ckpt::latest_step;
using ckpt::ListenerCounts;
using ckpt::MockListener;
using ckpt::TempDir;
using runhooks::CheckpointSaverHook;
using runhooks::CheckpointSaverOptions;

namespace {

constexpr double mock_start_time = 1484695987.209386;  // TensorFlow's MOCK_START_TIME

// TF's _HookedSession(sess, [hook]) for one hook: run() is the train op (the backend's step, +1
// or +increment) and the hook's after_run.
template <class Hook, class Backend>
struct Hooked {
  Hook& hook;
  Backend& backend;
  bool stop = false;
  void run() {
    backend.run();
    const runhooks::SessionRunArgs<> args;
    runhooks::SessionRunContext<Backend> context(args, backend);
    const runhooks::SessionRunValues<runhooks::SessionRunArgs<>> values;
    hook.after_run(context, values);
    stop = stop || context.stop_requested();
  }
};
template <class Hook, class Backend>
Hooked(Hook&, Backend&) -> Hooked<Hook, Backend>;

struct QuietLog {
  ckpt::CapturedLog log;
};

}  // namespace

TEST_CASE("89 test_raise_in_both_secs_and_steps / test_raise_in_none_secs_and_steps") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(CheckpointSaverHook(CheckpointSaverOptions{
                           .checkpoint_dir = dir.str(), .save_steps = 20, .save_secs = 10.0}),
                       "Can not provide both every_secs and every_steps. (CheckpointSaverOptions: "
                       "save_steps = 20, save_secs = 10)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(CheckpointSaverHook(CheckpointSaverOptions{.checkpoint_dir = dir.str()}),
                       doctest::Contains("Either every_secs or every_steps should be provided."),
                       std::invalid_argument);
}

TEST_CASE("checkpoint saver: bad options name the option and the value") {
  TempDir dir;
  const std::string d = dir.str();
  auto error = [](auto make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error([&] { [[maybe_unused]] CheckpointSaverOptions o{.checkpoint_dir = d, .save_steps = 0}; }) ==
        "runhooks: CheckpointSaverOptions::save_steps must be at least 1, got 0.");
  CHECK(error([&] { [[maybe_unused]] CheckpointSaverOptions o{.checkpoint_dir = d, .save_secs = -1.0}; })
            .find("CheckpointSaverOptions::save_secs must be a number of seconds greater than 0") !=
        std::string::npos);
  CHECK(error([&] { [[maybe_unused]] CheckpointSaverOptions o{.checkpoint_dir = "", .save_steps = 1}; }) ==
        "runhooks: CheckpointSaverOptions::checkpoint_dir must name a directory, got ''.");
  CHECK(error([&] { [[maybe_unused]] CheckpointSaverOptions o{.checkpoint_dir = d, .save_steps = 1, .basename = "a/b"}; })
            .find("CheckpointSaverOptions::basename must be a file name") != std::string::npos);
  CHECK(error([&] { [[maybe_unused]] CheckpointSaverOptions o{.checkpoint_dir = d, .save_steps = 1, .max_to_keep = -2}; }) ==
        "runhooks: CheckpointSaverOptions::max_to_keep must be at least 0, got -2.");
  CHECK(error([&] {
          [[maybe_unused]] CheckpointSaverOptions o{.checkpoint_dir = d, .save_steps = 1,
                                                    .keep_checkpoint_every_n_hours = 0.0};
        }).find("keep_checkpoint_every_n_hours must be greater than 0") != std::string::npos);
  // Options changed after they were made are checked again by the hook.
  CheckpointSaverOptions changed{.checkpoint_dir = d, .save_steps = 1};
  changed.save_secs = 5.0;
  CHECK_THROWS_AS(CheckpointSaverHook<>{changed}, std::invalid_argument);
  // Constant options are checked at compile time (tests/compile_fail/checkpoint_saver_options_*).
  constexpr CheckpointSaverOptions fine{.checkpoint_dir = "ckpt", .save_steps = 100};
  static_assert(fine.save_steps == 100);
}

TEST_CASE("89 test_save_secs_saves_in_first_step") {
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_secs = 2.0});
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  session.run();
  CHECK(latest_step(dir.path) == 1);
}

TEST_CASE("89 test_save_secs_calls_listeners_at_begin_and_end") {
  QuietLog quiet;
  TempDir dir;
  MockListener listener;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_secs = 2.0}, listener);
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  session.run();  // hook runs here
  session.run();  // hook won't run here, so it does at end
  hook.end(backend);
  CHECK(*listener.counts == ListenerCounts{.begin = 1, .before_save = 2, .after_save = 2, .end = 1});
}

TEST_CASE("89 test_listener_with_monitored_session (and with the default saver: restored 2)") {
  QuietLog quiet;
  TempDir dir;
  MockListener listener;
  std::int64_t global_step = -1;
  {
    runhooks::SingularMonitoredSession session{
        runhooks::ChiefSessionCreator{[] { return CheckpointedBackend{}; },
                                      {.checkpoint_dir = dir.str()}},
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1}, listener)};
    session.run();
    session.run();
    global_step = session.raw_session().global_step();
  }
  CHECK(global_step == 2);
  CHECK(*listener.counts == ListenerCounts{.begin = 1, .before_save = 3, .after_save = 3, .end = 1});
  CHECK(listener.counts->before_steps == std::vector<std::int64_t>{0, 1, 2});
  // test_listener_with_default_saver's second half: a new session restores step 2.
  runhooks::SingularMonitoredSession again{runhooks::ChiefSessionCreator{
      [] { return CheckpointedBackend{}; }, {.checkpoint_dir = dir.str()}}};
  CHECK(fakes::read_gstep(again) == 2);
}

TEST_CASE("89 test_two_listeners_with_default_saver") {
  QuietLog quiet;
  TempDir dir;
  MockListener first, second;
  {
    runhooks::SingularMonitoredSession session{
        runhooks::ChiefSessionCreator{[] { return CheckpointedBackend{}; },
                                      {.checkpoint_dir = dir.str()}},
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1}, first, second)};
    session.run();
    session.run();
    CHECK(session.raw_session().global_step() == 2);
  }
  CHECK(*first.counts == ListenerCounts{.begin = 1, .before_save = 3, .after_save = 3, .end = 1});
  CHECK(*first.counts == *second.counts);
  runhooks::SingularMonitoredSession again{runhooks::ChiefSessionCreator{
      [] { return CheckpointedBackend{}; }, {.checkpoint_dir = dir.str()}}};
  CHECK(fakes::read_gstep(again) == 2);
}

TEST_CASE("89 test_listener_stops_training_in_after_save") {
  QuietLog quiet;
  TempDir dir;
  MockListener listener;
  runhooks::SingularMonitoredSession session{
      runhooks::ChiefSessionCreator{[] { return CheckpointedBackend{}; },
                                    {.checkpoint_dir = dir.str()}},
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1}, listener)};
  session.run();
  CHECK_FALSE(session.should_stop());
  session.run();
  CHECK_FALSE(session.should_stop());
  listener.counts->ask_for_stop = true;
  session.run();
  CHECK(session.should_stop());
  CHECK(quiet.log.contains("a checkpoint listener requested that training be stopped"));
}

TEST_CASE("89 test_save_secs_saves_periodically") {
  QuietLog quiet;
  TempDir dir;
  runhooks::ManualClock clock(mock_start_time);
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_secs = 2.0}, clock);
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  clock.set(mock_start_time);
  session.run();  // Saved.
  clock.set(mock_start_time + 0.5);
  session.run();  // Not saved.
  CHECK(latest_step(dir.path) == 1);
  clock.set(mock_start_time + 2.5);  // Simulate 2.5 seconds of sleep.
  session.run();  // Saved.
  clock.set(mock_start_time + 2.6);
  session.run();  // Not saved.
  clock.set(mock_start_time + 2.7);
  session.run();  // Not saved.
  CHECK(latest_step(dir.path) == 3);
  clock.set(mock_start_time + 10);  // Simulate 7.5 more seconds of sleep.
  session.run();  // Saved.
  CHECK(latest_step(dir.path) == 6);
  // The mocked clock also dates the checkpoints, as TensorFlow's mocked time.time() does.
  const auto state = runhooks::read_checkpoint_state(dir.path);
  CHECK(state->all_model_checkpoint_timestamps ==
        std::vector<double>{mock_start_time, mock_start_time + 2.5, mock_start_time + 10});
}

// A clock that counts its reads.
struct CountingClock {
  std::shared_ptr<std::pair<double, int>> state = std::make_shared<std::pair<double, int>>(0.0, 0);
  double now() const noexcept {
    ++state->second;
    return state->first;
  }
};

TEST_CASE("checkpoint saver: save_secs samples the clock about 64 times per period, not every step") {
  QuietLog quiet;
  TempDir dir;
  CountingClock clock;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_secs = 1.0}, clock);
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  // 10,000 steps per second for 10.5 seconds: TensorFlow's timer would read the clock on each
  // of the 105,000 steps.
  for (int i = 0; i < 105000; ++i) {
    clock.state->first = i / 10000.0;
    session.run();
  }
  // About 64 samples per second, each reading the clock twice (the stride, the timer), and a
  // read per save for its timestamp: 1376 here.
  CHECK(clock.state->second < 2 * 64 * 11);
  CHECK(clock.state->second > 64 * 9);
  // A save once the period has passed since the last one (TensorFlow's timer), each at most
  // 1/64 of the period (157 steps) late.
  const auto state = runhooks::read_checkpoint_state(dir.path);
  REQUIRE(state);
  const std::vector<double>& at = state->all_model_checkpoint_timestamps;
  REQUIRE(at.size() == 5);  // max_to_keep
  for (std::size_t k = 1; k < at.size(); ++k) {
    CHECK(at[k] - at[k - 1] >= 1.0);
    CHECK(at[k] - at[k - 1] <= 1.0 + 1.0 / 64 + 1e-9);
  }
}

TEST_CASE("89 test_save_secs_calls_listeners_periodically") {
  QuietLog quiet;
  TempDir dir;
  runhooks::ManualClock clock(mock_start_time);
  MockListener listener;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_secs = 2.0}, clock, listener);
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  for (const double at : {0.5, 0.5, 3.0, 3.5, 4.0, 6.5, 7.0}) {
    clock.set(mock_start_time + at);
    session.run();  // the hook runs at 0.5, 3.0 and 6.5
  }
  clock.set(mock_start_time + 7.5);
  hook.end(backend);  // and here
  CHECK(*listener.counts == ListenerCounts{.begin = 1, .before_save = 4, .after_save = 4, .end = 1});
  CHECK(listener.counts->before_steps == std::vector<std::int64_t>{1, 3, 6, 7});
}

TEST_CASE("89 test_save_steps_saves_in_first_step") {
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_steps = 2});
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  session.run();
  CHECK(latest_step(dir.path) == 1);
}

TEST_CASE("89 test_save_steps_saves_periodically (and ResourceCheckpointSaverHookTest)") {
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_steps = 2});
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  std::vector<std::int64_t> read;
  for (int run = 0; run < 5; ++run) {
    session.run();
    read.push_back(latest_step(dir.path));
  }
  CHECK(read == std::vector<std::int64_t>{1, 1, 3, 3, 5});
}

TEST_CASE("89 test_save_saves_at_end") {
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_secs = 2.0});
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  session.run();
  session.run();
  hook.end(backend);
  CHECK(latest_step(dir.path) == 2);
}

TEST_CASE("89 test_save_checkpoint_before_first_train_step") {
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_steps = 2});
  CheckpointedBackend backend;
  hook.begin();
  Hooked session{hook, backend};
  hook.after_create_session(backend);
  CHECK(latest_step(dir.path) == 0);  // saved at step 0
  session.run();
  CHECK(latest_step(dir.path) == 0);  // no checkpoint after one training step
  session.run();
  CHECK(latest_step(dir.path) == 2);  // saved after save_steps
}

TEST_CASE("89 CheckpointSaverHookMultiStepTest (steps_per_run=5, save_steps=10)") {
  // TensorFlow needs _set_steps_per_run(5) to pre-check stale + 5; runhooks reads the step after
  // the run, which gives the same saves with no option.
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_steps = 10});
  CheckpointedBackend backend;
  backend.increment = 5;
  hook.begin();
  Hooked session{hook, backend};

  SUBCASE("test_save_steps_saves_in_first_step and _periodically") {
    std::vector<std::int64_t> read;
    for (int run = 0; run < 5; ++run) {
      session.run();
      read.push_back(latest_step(dir.path));
    }
    CHECK(read == std::vector<std::int64_t>{5, 5, 15, 15, 25});
  }
  SUBCASE("test_save_steps_saves_at_end") {
    session.run();
    session.run();
    hook.end(backend);
    CHECK(latest_step(dir.path) == 10);
  }
}

TEST_CASE("checkpoint saver: a recovery saves at the restored step and re-bases the timer") {
  QuietLog quiet;
  TempDir dir;
  bool lost = false;
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator{[&] {
                                      CheckpointedBackend backend;
                                      if (!lost) backend.throw_at(6, runhooks::AbortedError("lost"));
                                      lost = true;
                                      return backend;
                                    },
                                    {.checkpoint_dir = dir.str()}},
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 4})};
  for (int i = 0; i < 5; ++i) session.run();  // saves at 0 and 4; step 5
  CHECK(latest_step(dir.path) == 4);
  session.run();  // the 6th run aborts: restored at 4, saved at 4 again, replayed: 5
  CHECK(session.raw_session().global_step() == 5);
  for (int i = 0; i < 3; ++i) session.run();  // 6, 7, 8: saves at 8
  CHECK(latest_step(dir.path) == 8);
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-0", "model.ckpt-4", "model.ckpt-8"});
}

TEST_CASE("checkpoint saver: end() does not save a step just saved") {
  QuietLog quiet;
  TempDir dir;
  CheckpointedBackend backend;
  MockListener listener;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_steps = 2}, listener);
  hook.begin();
  hook.after_create_session(backend);
  Hooked session{hook, backend};
  session.run();
  session.run();  // saved at 2
  hook.end(backend);
  CHECK(listener.counts->before_steps == std::vector<std::int64_t>{0, 2});
  CHECK(hook.last_saved_step() == 2);
}

TEST_CASE("checkpoint saver: a failed save raises from run() with the path; the state stays") {
  QuietLog quiet;
  TempDir dir;
  std::shared_ptr<bool> fail = std::make_shared<bool>(false);
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator{[] { return CheckpointedBackend{}; },
                                    {.checkpoint_dir = dir.str()}},
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
  session.run();
  session.run();  // saved at 2
  session.raw_session().save_error = "the disk is full";
  session.run();
  CHECK_THROWS_WITH_AS(session.run(),
                       ("runhooks: saving checkpoint '" + (dir / "model.ckpt-4").string() +
                        "' failed: the disk is full")
                           .c_str(),
                       runhooks::CheckpointError);
  CHECK(latest_step(dir.path) == 2);
  CHECK(ckpt::files_in_but_events(dir.path) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-0.arrays", "model.ckpt-2.arrays"});
}

TEST_CASE("checkpoint saver: an unwritable directory fails at session creation, not at a save") {
  QuietLog quiet;
  TempDir dir;
  { std::ofstream(dir / "file") << "a regular file"; }
  const std::string bad = (dir / "file" / "ckpt").string();
  CHECK_THROWS_WITH_AS(
      runhooks::MonitoredSession(CheckpointedBackend{},
                                 CheckpointSaverHook({.checkpoint_dir = bad, .save_steps = 1000})),
      ("runhooks: cannot create the checkpoint directory '" + bad + "': Not a directory").c_str(),
      runhooks::CheckpointError);
}

TEST_CASE("checkpoint saver: per step, one load and one compare between saves") {
  // The hook's state is its options plus a few words; listeners without state add nothing.
  struct Empty {
    void begin() {}
  };
  static_assert(sizeof(CheckpointSaverHook<runhooks::SteadyClock, Empty>) ==
                sizeof(CheckpointSaverHook<>));
  QuietLog quiet;
  TempDir dir;
  CheckpointSaverHook hook({.checkpoint_dir = dir.str(), .save_steps = 1000});
  CheckpointedBackend backend;
  hook.begin();
  hook.after_create_session(backend);
  Hooked session{hook, backend};
  for (int i = 0; i < 999; ++i) session.run();
  CHECK(*backend.saves == 1);
  session.run();
  CHECK(*backend.saves == 2);
}

TEST_CASE("the hook holds its directory's writer lock from begin() to end()") {
  QuietLog quiet;
  TempDir dir;
  runhooks::SingularMonitoredSession first{
      runhooks::ChiefSessionCreator{[] { return CheckpointedBackend{}; }, {.checkpoint_dir = dir.str()}},
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
  first.run();
  // While the first session is open, a second writer on the directory fails at creation.
  const auto second_session = [&] {
    return runhooks::SingularMonitoredSession{
        runhooks::ChiefSessionCreator{[] { return CheckpointedBackend{}; }, {.checkpoint_dir = dir.str()}},
        CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
  };
  CHECK_THROWS_WITH_AS(second_session(), doctest::Contains("already has a writer"),
                       runhooks::CheckpointError);
  // Closed (end() ran, the final save done), the first session's object still alive: the
  // directory is free, and its state file lists no pending deletion.
  first.close();
  CHECK(ckpt::read_text(dir / "checkpoint").find("runhooks-delete") == std::string::npos);
  auto second = second_session();
  CHECK(fakes::read_gstep(second) == 1);
}

TEST_CASE("options() and checkpoint_dir() are the settings as given, held by the hook") {
  TempDir dir;
  std::optional<CheckpointSaverHook<>> hook;
  {
    // The caller's strings end here: options() must not view them.
    std::string checkpoint_dir = dir.str();
    std::string basename = "model";
    hook.emplace(CheckpointSaverOptions{.checkpoint_dir = checkpoint_dir,
                                        .save_secs = 60.0,
                                        .basename = basename,
                                        .max_to_keep = 3,
                                        .async_save = false});
    checkpoint_dir.assign(checkpoint_dir.size(), 'x');
    basename.assign(basename.size(), 'x');
  }
  const auto check = [&](const CheckpointSaverHook<>& h) {
    CHECK(h.options().checkpoint_dir == dir.str());
    CHECK(h.options().basename == "model");
    CHECK(!h.options().save_steps.has_value());
    CHECK(h.options().save_secs == 60.0);
    CHECK(h.options().max_to_keep == 3);
    CHECK(!h.options().async_save);
    CHECK(h.options().when_save_in_flight == runhooks::WhenSaveInFlight::wait);
    CHECK(h.checkpoint_dir() == std::filesystem::path(dir.str()));
  };
  check(*hook);
  // A move may relocate the strings the options view (short ones live inside std::string).
  const CheckpointSaverHook<> moved(std::move(*hook));
  hook.reset();
  check(moved);
}

TEST_CASE("checkpoint saver: a synchronous save returns once committed; the checkpoint it drops "
          "is deleted on another thread, done by the next save and by close()") {
  QuietLog quiet;
  TempDir dir;
  runhooks::MonitoredSession session{
      CheckpointedBackend{},
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1, .max_to_keep = 1})};
  ckpt::OtherThreadsGate gate;  // the training thread's operations pass, any other waits
  session.run();  // saves 1, drops 0
  // Committed and durable, while 0's file waits for a thread the step did not wait for.
  CHECK(latest_step(dir.path) == 1);
  CHECK(ckpt::named_checkpoints(dir.path) == std::vector<std::string>{"model.ckpt-1"});
  CHECK(ckpt::files_in_but_events(dir.path) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-0.arrays", "model.ckpt-1.arrays"});
  gate.release();
  session.run();  // saves 2 after the deletion of 0 is done, drops 1
  session.close();
  CHECK(ckpt::files_in_but_events(dir.path) ==
        std::vector<std::string>{"checkpoint", "model.ckpt-2.arrays"});
  CHECK(runhooks::read_checkpoint_state(dir.path)->pending_deletions.empty());
}
