// make_training_session: TensorFlow's MonitoredTrainingSessionTest (cases I80-I87 of
// tf-semantics.md §3) with its numbers, TensorFlow's hook order and defaults (§1.10), the
// chief/worker roles at run time and at compile time, the restore on creation and recovery, the
// doc/code mismatch (both secs and steps) as an error, SignalStopHook on by default, the clock
// of the timed default hooks (save_checkpoint_secs on a ManualClock), the default hooks
// read back from the session, and the states of the user's stateful hooks in its checkpoints.

#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hooks/lambda_hook.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/training_session.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <chrono>
#include <type_traits>
#include <vector>

#include "support/checkpoint_backends.hpp"
#include "support/fakes.hpp"
#include "support/run_directory.hpp"

namespace fs = std::filesystem;
using ckpt::CheckpointedBackend;
using fakes::do_step;
using fakes::read_gstep;
using runhooks::make_training_session;
using runhooks::Role;

namespace {

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "my_summary";
};

// CheckpointedBackend with a scalar to summarize.
struct Backend : CheckpointedBackend {
  using CheckpointedBackend::fetch;
  float fetch(Loss) const { return static_cast<float>(step) * 0.5f; }
};
auto factory() {
  return [] { return Backend{}; };
}

// Every tag in the event files of `dir`.
std::set<std::string> tags_in(const fs::path& dir) {
  std::set<std::string> tags;
  if (!fs::exists(dir)) return tags;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) != 0) continue;
    for (const auto& event : runhooks::read_event_file(entry.path()))
      for (const auto& value : event.summary) tags.insert(value.tag);
  }
  return tags;
}
int event_files_in(const fs::path& dir) {
  int n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& entry : fs::directory_iterator(dir))
    n += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  return n;
}

// TF's `with MonitoredTrainingSession(checkpoint_dir=logdir) as session: session.run(gstep)`.
// A hook with state (StatefulHook): the runs it saw.
struct RunCounter {
  struct State {
    std::int64_t runs;
  };
  std::int64_t runs = 0;
  std::vector<std::int64_t> restored;  // every state restored, in order
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    ++runs;
  }
  static std::string state_name() { return "RunCounter"; }
  State state() const { return {runs}; }
  void restore(const State& s) {
    runs = s.runs;
    restored.push_back(s.runs);
  }
};
static_assert(runhooks::StatefulHook<RunCounter>);

std::int64_t restart_reads(const fs::path& dir) {
  auto session = make_training_session({.checkpoint_dir = dir.c_str(), .stop_on_signals = false},
                                       factory());
  return read_gstep(session);
}

}  // namespace

TEST_CASE("I80 test_saving_restoring_checkpoint: 0, 1, 2; a restart reads 2") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  {
    auto session = make_training_session({.checkpoint_dir = logdir}, factory());
    CHECK(read_gstep(session) == 0);
    CHECK(do_step(session) == 1);
    CHECK(do_step(session) == 2);
  }
  // Saved at after_create_session (step 0) and at end (step 2): the default 600 s never came.
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-0", "model.ckpt-2"});
  CHECK(restart_reads(dir.path) == 2);
}

TEST_CASE("I81 test_save_checkpoint_steps: save_checkpoint_steps=100, 100 steps; a restart reads 100") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  {
    auto session = make_training_session(
        {.checkpoint_dir = logdir, .save_checkpoint_steps = 100, .stop_on_signals = false},
        factory());
    for (int i = 0; i < 100; ++i) do_step(session);
  }
  CHECK(restart_reads(dir.path) == 100);
}

TEST_CASE("I82 test_save_checkpoint_secs: 0.1 s, 1 step, sleep 0.2 s, 10 steps; a restart reads 11") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  {
    auto session = make_training_session({.checkpoint_dir = logdir, .save_checkpoint_secs = 0.1},
                                         factory());
    do_step(session);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int i = 0; i < 10; ++i) do_step(session);
  }
  CHECK(restart_reads(dir.path) == 11);
}

TEST_CASE("I83 test_save_restore_checkpoint_v1_saved_model: w_add gives 6, then 7; after a restart 8") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  auto w_add = [](auto& session) {
    return *session.run(runhooks::SessionRunArgs{runhooks::feed<fakes::CallerAdd>(1.0),
                                                 runhooks::fetch<fakes::Var>()})[fakes::Var{}];
  };
  auto starting_at_5 = [] {
    Backend b;
    b.var = 5.0;
    return b;
  };
  {
    auto session = make_training_session({.checkpoint_dir = logdir}, starting_at_5);
    CHECK(w_add(session) == 6.0);
    CHECK(w_add(session) == 7.0);
  }
  auto session = make_training_session({.checkpoint_dir = logdir}, starting_at_5);
  CHECK(w_add(session) == 8.0);
}

TEST_CASE("I84 test_summaries_steps / test_summaries_secs: the tags include my_summary and global_step/sec") {
  fakes::LogCapture capture;
  for (const bool by_secs : {false, true}) {
    INFO("by_secs ", by_secs);
    const ckpt::TempDir dir;
    const std::string logdir = dir.path.string();
    runhooks::TrainingSessionOptions options{.checkpoint_dir = logdir,
                                             .log_step_count_steps = 10};
    if (by_secs)
      options.save_summaries_secs = 0.01;
    else
      options.save_summaries_steps = 100;
    {
      auto session = make_training_session(options, factory(), runhooks::scalars<Loss>);
      for (int i = 0; i < 101; ++i) {
        session.run();
        if (by_secs && i % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    const std::set<std::string> tags = tags_in(dir.path);
    CHECK(tags.count("my_summary") == 1);
    CHECK(tags.count("global_step/sec") == 1);
  }
}

TEST_CASE("make_training_session: the step rate's log line and chart are chosen apart (issue 30)") {
  // 20,000 steps logged a line every 100; log_step_count_steps = 0, the only way to silence
  // them, also removed the chart. Each of the four choices, 100 steps at 10 a line.
  struct Case {
    bool line, chart;
  };
  for (const Case c : {Case{true, true}, Case{false, true}, Case{true, false}, Case{false, false}}) {
    INFO("step_rate_log_line ", c.line, ", step_rate_chart ", c.chart);
    fakes::LogCapture capture;
    const ckpt::TempDir dir;
    const std::string logdir = dir.path.string();
    {
      auto session = make_training_session({.checkpoint_dir = logdir,
                                            .save_checkpoint_secs = 0,
                                            .log_step_count_steps = 10,
                                            .step_rate_log_line = c.line,
                                            .step_rate_chart = c.chart,
                                            .stop_on_signals = false},
                                           factory());
      CHECK((session.step_counter() != nullptr) == (c.line || c.chart));
      for (int i = 0; i < 101; ++i) session.run();
    }
    int lines = 0;
    for (const std::string& line : capture.lines()) lines += line.rfind("global_step/sec: ", 0) == 0;
    CHECK(lines == (c.line ? 10 : 0));  // at steps 11, 21, ..., 101
    CHECK(tags_in(dir.path).count("global_step/sec") == (c.chart ? 1u : 0u));
    if (!c.chart) CHECK(event_files_in(dir.path) == 0);
  }
}

TEST_CASE("I85 test_custom_saving: chief_only FakeHook, save_checkpoint_secs=0: 0, 1, 2; begin once; a restart reads 0") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  fakes::FakeHook<> fake;
  {
    auto session = make_training_session({.checkpoint_dir = logdir, .save_checkpoint_secs = 0},
                                         factory(), runhooks::chief_only(std::ref(fake)));
    CHECK(read_gstep(session) == 0);
    CHECK(do_step(session) == 1);
    CHECK(do_step(session) == 2);
  }
  CHECK(fake.call_counter.begin == 1);
  CHECK(fake.call_counter.end == 1);
  CHECK_FALSE(runhooks::latest_checkpoint(dir.path).has_value());  // no checkpoint hook
  CHECK(restart_reads(dir.path) == 0);
}

TEST_CASE("I87 a worker: no summaries, no checkpoints, no chief-only hooks; it restores the chief's") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  const std::string worker_summaries = (dir.path / "worker").string();
  {
    auto chief = make_training_session({.checkpoint_dir = logdir, .save_checkpoint_steps = 1},
                                       factory());
    for (int i = 0; i < 5; ++i) do_step(chief);
  }
  const auto before = ckpt::named_checkpoints(dir.path);
  fakes::FakeHook<> chief_hook;
  {
    auto worker = make_training_session({.is_chief = false,
                                         .checkpoint_dir = logdir,
                                         .save_checkpoint_steps = 1,
                                         .summary_dir = worker_summaries},
                                        factory(), runhooks::chief_only(std::ref(chief_hook)),
                                        runhooks::scalars<Loss>);
    CHECK(read_gstep(worker) == 5);  // restored from the chief's latest checkpoint
    for (int i = 0; i < 3; ++i) do_step(worker);
  }
  CHECK(ckpt::named_checkpoints(dir.path) == before);  // the worker saved nothing
  CHECK(event_files_in(worker_summaries) == 0);
  CHECK(chief_hook.call_counter.begin == 0);
  CHECK(chief_hook.call_counter.before_run == 0);
}

TEST_CASE("I87 a worker waits max_wait_secs for the chief's first checkpoint, then gives up") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  CHECK_THROWS_WITH_AS(make_training_session({.is_chief = false,
                                              .checkpoint_dir = logdir,
                                              .max_wait_secs = 0.5},
                                             factory()),
                       doctest::Contains("Session was not ready after waiting 0.5 secs."),
                       runhooks::DeadlineExceededError);
}

TEST_CASE("a worker waiting for the chief's checkpoint stops at once on SIGTERM") {
  // A stop always wins over creation (issue 17): the wait ends, and the session stops without
  // using the backend the creator then returns.
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  std::jthread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::raise(SIGTERM);
  });
  const auto started = std::chrono::steady_clock::now();
  auto worker = make_training_session(
      {.is_chief = false, .checkpoint_dir = logdir, .max_wait_secs = 60.0}, factory());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(secs < 5.0);  // a hang guard, not a timing claim: the wait alone would take 60 s
  CHECK(worker.should_stop());
  CHECK(capture.contains("stopped during recovery (SIGTERM received)"));
  worker.close();
}

TEST_CASE("make_training_session: TensorFlow's hook order and defaults (§1.10)") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  fakes::CallLog calls;
  fakes::FakeHook<> chief;
  chief.name = "chief";
  chief.log = &calls;
  fakes::FakeHook<> user;
  user.name = "user";
  user.log = &calls;
  auto session = make_training_session({.checkpoint_dir = logdir}, factory(), std::ref(user),
                                       runhooks::chief_only(std::ref(chief)),
                                       runhooks::scalars<Loss>);
  // chief-only, StepCounterHook, SummarySaverHook, CheckpointSaverHook, user, SignalStopHook.
  using S = decltype(session);
  CHECK(runhooks::detail::session_hook_count<typename S::MonitoredSession>::value == 6);
  CHECK(session.hook<1>().enabled());
  CHECK(session.hook<1>().get()->options().every_n_steps == 100);
  CHECK(session.hook<2>().enabled());
  CHECK(session.hook<2>().get()->options().save_steps == 100);
  CHECK(session.hook<3>().enabled());
  CHECK(session.hook<5>().enabled());
  CHECK(calls.entries == std::vector<std::string>{"chief.begin", "user.begin",
                                                  "chief.after_create_session",
                                                  "user.after_create_session"});
  // TensorFlow's USE_DEFAULT: one summary option set, the other is off; 0 turns a hook off.
  auto quiet = make_training_session({.checkpoint_dir = logdir,
                                      .save_checkpoint_secs = 0,
                                      .save_summaries_secs = 0,
                                      .log_step_count_steps = 0,
                                      .stop_on_signals = false},
                                     factory(), runhooks::scalars<Loss>);
  CHECK_FALSE(quiet.hook<0>().enabled());
  CHECK_FALSE(quiet.hook<1>().enabled());
  CHECK_FALSE(quiet.hook<2>().enabled());
  CHECK_FALSE(quiet.hook<3>().enabled());
}

TEST_CASE("make_training_session's defaults: one event file per run in checkpoint_dir, and TensorBoard shows every point, a resume included") {
  // The step counter, the summary saver and the checkpoint saver all write to checkpoint_dir: one
  // file per process, one START per session, a CHECKPOINT per save. TensorBoard reads the
  // directory: a resumed run's START (at 102) drops nothing of the first run's (all at or
  // before 101).
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  const runhooks::TrainingSessionOptions options{.checkpoint_dir = logdir,
                                                 .save_checkpoint_steps = 50,
                                                 .save_summaries_steps = 25,
                                                 .log_step_count_steps = 10,
                                                 .stop_on_signals = false};
  using Status = runhooks::SessionLog::Status;
  using Steps = std::vector<std::int64_t>;
  using Logs = std::vector<std::pair<std::int64_t, std::string>>;
  const std::string saved = (dir.path / "model.ckpt").string();
  auto train = [&](int runs) {
    auto session = make_training_session(options, factory(), runhooks::scalars<Loss>);
    for (int i = 0; i < runs; ++i) session.run();
    session.close();
  };

  train(101);
  run_directory::Events written = run_directory::read_events(dir.path);
  CHECK(written.files.size() == 1);
  CHECK(written.session_logs(Status::start) == Logs{{1, ""}});
  CHECK(written.session_logs(Status::checkpoint) ==
        Logs{{0, saved}, {50, saved}, {100, saved}, {101, saved}});
  const Steps rates{11, 21, 31, 41, 51, 61, 71, 81, 91, 101};
  CHECK(written.steps_of("global_step/sec") == rates);
  CHECK(written.steps_of("my_summary") == Steps{1, 26, 51, 76, 101});

  train(49);  // resumes at 101 (a new process would too), ends at 150
  written = run_directory::read_events(dir.path);
  CHECK(written.files.size() == 2);
  CHECK(written.session_logs(Status::start) == Logs{{1, ""}, {102, ""}});
  CHECK(written.session_logs(Status::checkpoint) ==
        Logs{{0, saved}, {50, saved}, {100, saved}, {101, saved}, {101, saved}, {150, saved}});

  auto seen = run_directory::read_with_tensorboard(dir.path, dir.path);
  if (!seen) return;
  CHECK(seen->files == 2);
  CHECK(run_directory::steps(seen->scalars["global_step/sec"]) ==
        Steps{11, 21, 31, 41, 51, 61, 71, 81, 91, 101, 112, 122, 132, 142});
  for (const auto& [step, rate] : seen->scalars["global_step/sec"]) CHECK(rate > 0.0);
  std::vector<std::pair<std::int64_t, double>> summaries;
  for (const std::int64_t step : {1, 26, 51, 76, 101, 102, 127})
    summaries.emplace_back(step, 0.5 * static_cast<double>(step));
  CHECK(seen->scalars["my_summary"] == summaries);
  CHECK(seen->session_logs.size() == 2 + 6);
}

TEST_CASE("make_training_session: both secs and steps is TensorFlow's doc/code mismatch, an error") {
  CHECK_THROWS_WITH_AS(
      static_cast<void>(runhooks::TrainingSessionOptions{.save_checkpoint_secs = 60, .save_checkpoint_steps = 100}),
      doctest::Contains("sets both save_checkpoint_secs (60) and save_checkpoint_steps (100)"),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(runhooks::TrainingSessionOptions{.save_summaries_steps = 10, .save_summaries_secs = 1.0}),
      doctest::Contains("sets both save_summaries_steps (10) and save_summaries_secs (1)"),
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(runhooks::TrainingSessionOptions{.log_step_count_steps = -1}),
                       doctest::Contains("log_step_count_steps must be at least 0"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(runhooks::TrainingSessionOptions{.max_wait_secs = -1.0}),
                       doctest::Contains("TrainingSessionOptions::max_wait_secs"),
                       std::invalid_argument);
  // A backend that cannot be checkpointed, with a checkpoint_dir.
  struct Plain {
    std::int64_t step = 0;
    void run() { ++step; }
    std::int64_t global_step() const { return step; }
  };
  CHECK_THROWS_WITH_AS(make_training_session({.checkpoint_dir = "/tmp/x"}, [] { return Plain{}; }),
                       doctest::Contains("the backend cannot be checkpointed"),
                       std::invalid_argument);
}

TEST_CASE("make_training_session: compile-time roles") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  fakes::FakeHook<> chief_hook;
  {
    auto chief = make_training_session<Role::chief>({.checkpoint_dir = logdir}, factory(),
                                                    runhooks::chief_only(std::ref(chief_hook)));
    // The chief-only hook is stored as is, not behind a flag.
    CHECK(std::is_same_v<std::remove_cvref_t<decltype(chief.hook<0>())>, fakes::FakeHook<>>);
    do_step(chief);
  }
  CHECK(chief_hook.call_counter.before_run == 1);
  auto worker = make_training_session<Role::worker>({.checkpoint_dir = logdir}, factory(),
                                                    runhooks::chief_only(std::ref(chief_hook)),
                                                    runhooks::scalars<Loss>);
  // Only SignalStopHook: no chief-only hook and no default hook in the type.
  using W = decltype(worker);
  CHECK(runhooks::detail::session_hook_count<typename W::MonitoredSession>::value == 1);
  CHECK(read_gstep(worker) == 1);
}

TEST_CASE("make_training_session: recovery restores the latest checkpoint") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  int created = 0;
  bool lost = false;
  auto session = make_training_session(
      {.checkpoint_dir = logdir, .save_checkpoint_steps = 2, .stop_on_signals = false},
      [&] {
        ++created;
        return Backend{};
      },
      runhooks::on_before_run([&](auto& ctx) {
        if (!lost && ctx.session().step == 5) {
          lost = true;
          throw runhooks::AbortedError("lost");
        }
      }));
  for (int i = 0; i < 5; ++i) do_step(session);  // checkpoints at 0, 2, 4
  CHECK(do_step(session) == 5);  // lost at 5, restored at 4, replayed
  CHECK(created == 2);
}

TEST_CASE("make_training_session: SignalStopHook is on by default; a SIGTERM ends the loop cleanly") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  auto session = make_training_session(
      {.checkpoint_dir = logdir, .save_checkpoint_steps = 1000},
      factory(), runhooks::on_after_run([](auto& ctx, const auto&) {
        if (ctx.session().step == 3) std::raise(SIGTERM);
      }));
  runhooks::run_loop(session);
  CHECK(session.raw_session().step == 3);
  CHECK(ckpt::latest_step(dir.path) == 3);  // end() saved the last step
}

TEST_CASE("make_training_session links a ProgressBarHook to the StopAtStepHook") {
  fakes::LogCapture capture;
  std::FILE* sink = std::tmpfile();
  {
    auto session = make_training_session(
        {.stop_on_signals = false}, [] { return Backend{}; },
        runhooks::StopAtStepHook({.num_steps = 7}),
        runhooks::ProgressBarHook{{.terminal = false}, sink});
    CHECK(session.hook<3>().total() == 7);
  }  // the bar draws its last line in end(): before the file is closed
  std::fclose(sink);
}

// TensorFlow's MOCK_START_TIME (tf-semantics.md §3).
constexpr double mock_start_time = 1484695987.209386;

TEST_CASE("make_training_session: a ManualClock times save_checkpoint_secs (TensorFlow's timer, §1.10)") {
  // The checkpoint saver saves at the session's creation, then on the first run whose step comes
  // save_checkpoint_secs or more after the last save (>=, SecondOrStepTimer), and at the end
  // unless the last step was just saved: TensorFlow's test_save_secs_saves_periodically, through
  // MonitoredTrainingSession.
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  runhooks::ManualClock clock(mock_start_time);
  {
    auto session = make_training_session(
        {.checkpoint_dir = logdir, .save_checkpoint_secs = 10, .stop_on_signals = false},
        factory(), clock);
    CHECK(std::is_same_v<decltype(session)::clock_type, runhooks::ManualClock>);
    CHECK(ckpt::latest_step(dir.path) == 0);  // after_create_session, at T
    CHECK(do_step(session) == 1);             // T: no save
    clock.set(mock_start_time + 9.5);
    CHECK(do_step(session) == 2);  // T+9.5: no save
    CHECK(ckpt::latest_step(dir.path) == 0);
    clock.set(mock_start_time + 10);
    CHECK(do_step(session) == 3);  // T+10: saved
    CHECK(ckpt::latest_step(dir.path) == 3);
    CHECK(do_step(session) == 4);  // still T+10: no save
    clock.set(mock_start_time + 25);
    CHECK(do_step(session) == 5);  // saved
    CHECK(ckpt::latest_step(dir.path) == 5);
  }  // end(): step 5 was just saved
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-0", "model.ckpt-3", "model.ckpt-5"});
  // The clock also dates the checkpoints, as TensorFlow's mocked time.time() does.
  const auto state = runhooks::read_checkpoint_state(dir.path);
  REQUIRE(state);
  CHECK(state->all_model_checkpoint_timestamps ==
        std::vector<double>{mock_start_time, mock_start_time + 10, mock_start_time + 25});
}

TEST_CASE("make_training_session: on a ManualClock, the default of 600 s and every timed hook") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  runhooks::ManualClock clock(mock_start_time);
  {
    // Neither checkpoint option: TensorFlow's USE_DEFAULT, a checkpoint every 600 s. Summaries
    // every 30 s; the step rate every 10 steps. One clock for all three.
    auto session = make_training_session({.checkpoint_dir = logdir,
                                          .save_summaries_secs = 30,
                                          .log_step_count_steps = 10,
                                          .stop_on_signals = false},
                                         factory(), runhooks::scalars<Loss>, clock);
    REQUIRE(session.checkpoint_saver() != nullptr);
    CHECK(session.checkpoint_saver()->options().save_secs == 600.0);
    REQUIRE(session.summary_saver() != nullptr);
    for (int i = 0; i < 20; ++i) {  // 0.5 s per step
      session.run();
      clock.advance(0.5);
    }
    CHECK(ckpt::latest_step(dir.path) == 0);  // 10 s: no save yet
    clock.set(mock_start_time + 599.5);
    session.run();  // step 21
    CHECK(ckpt::latest_step(dir.path) == 0);
    clock.set(mock_start_time + 600);
    session.run();  // step 22: 600 s after the save at step 0
    CHECK(ckpt::latest_step(dir.path) == 22);
    // The hooks read the clock the caller advanced (copies of a ManualClock share its time).
    CHECK(session.checkpoint_saver()->clock().now() == mock_start_time + 600);
    CHECK(session.summary_saver()->clock().now() == mock_start_time + 600);
    session.close();
  }
  const run_directory::Events written = run_directory::read_events(dir.path);
  // The step counter measured the manual clock: 10 steps in 5 s, from step 1 to step 11.
  std::vector<float> rates;
  for (const auto& event : written.events)
    for (const auto& value : event.summary)
      if (value.tag == "global_step/sec" && event.step == 11) rates.push_back(*value.simple_value);
  CHECK(rates == std::vector<float>{2.0f});
  // Summaries at the first run, then 30 s later (step 21, at T+599.5).
  CHECK(written.steps_of("my_summary") == std::vector<std::int64_t>{1, 21});
}

TEST_CASE("make_training_session: the default hooks, and their settings, read back from the session") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  const std::string summaries = (dir.path / "summaries").string();
  fakes::FakeHook<> chief;
  auto session = make_training_session({.checkpoint_dir = logdir,
                                        .save_checkpoint_steps = 250,
                                        .save_summaries_secs = 30,
                                        .log_step_count_steps = 20,
                                        .summary_dir = summaries,
                                        .stop_on_signals = false},
                                       factory(), runhooks::chief_only(std::ref(chief)),
                                       runhooks::StopAtStepHook({.last_step = 1000}),
                                       runhooks::scalars<Loss>);
  // By name, wherever the chief-only hooks and the keys put them.
  REQUIRE(session.checkpoint_saver() != nullptr);
  CHECK(session.checkpoint_saver()->checkpoint_dir() == fs::path(logdir));
  CHECK(session.checkpoint_saver()->options().save_steps == 250);
  CHECK_FALSE(session.checkpoint_saver()->options().save_secs.has_value());
  REQUIRE(session.summary_saver() != nullptr);
  CHECK(session.summary_saver()->options().save_secs == 30.0);
  CHECK_FALSE(session.summary_saver()->options().save_steps.has_value());
  REQUIRE(session.step_counter() != nullptr);
  CHECK(session.step_counter()->options().every_n_steps == 20);
  // Their positions are TensorFlow's order (§1.10): chief-only, step counter, summaries,
  // checkpoints, the other hooks, SignalStopHook.
  CHECK(session.hook<1>().get() == session.step_counter());
  CHECK(session.hook<2>().get() == session.summary_saver());
  CHECK(session.hook<3>().get() == session.checkpoint_saver());
  // Any hook by type, through the chief-only wrapper.
  CHECK(session.find_hook<fakes::FakeHook<>>() == &chief);
  REQUIRE(session.find_hook<runhooks::StopAtStepHook>() != nullptr);
  CHECK(session.find_hook<runhooks::StopAtStepHook>()->last_step() == 1000);
  CHECK(session.find_hook<runhooks::SignalStopHook>() == nullptr);  // stop_on_signals = false
  // The save period: a save at the 250th step after the one at creation.
  for (int i = 0; i < 249; ++i) session.run();
  CHECK(session.checkpoint_saver()->last_saved_step() == 0);
  session.run();
  CHECK(session.checkpoint_saver()->last_saved_step() == 250);
  session.close();

  // Off: a period of 0, no keys, a worker; then nullptr.
  auto quiet = make_training_session({.checkpoint_dir = logdir,
                                      .save_checkpoint_secs = 0,
                                      .log_step_count_steps = 0,
                                      .stop_on_signals = false},
                                     factory());
  CHECK(quiet.checkpoint_saver() == nullptr);
  CHECK(quiet.step_counter() == nullptr);
  CHECK(quiet.summary_saver() == nullptr);  // no keys: not in the session's type
  quiet.close();
  auto worker = make_training_session<Role::worker>({.checkpoint_dir = logdir}, factory(),
                                                    runhooks::scalars<Loss>);
  CHECK(worker.checkpoint_saver() == nullptr);
  CHECK(worker.step_counter() == nullptr);
  CHECK(worker.summary_saver() == nullptr);
}

TEST_CASE("make_training_session: the user's stateful hooks are saved with every checkpoint and restored on start and recovery") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::string logdir = dir.path.string();
  bool lost = false;
  {
    auto session = make_training_session(
        {.checkpoint_dir = logdir, .save_checkpoint_steps = 2, .stop_on_signals = false},
        factory(), RunCounter{}, runhooks::on_before_run([&](auto& ctx) {
          if (!lost && ctx.session().step == 5) {
            lost = true;
            throw runhooks::AbortedError("lost");
          }
        }));
    // The saver follows the stateful hook: hooks 0 (step counter), 1 (RunCounter), 2 (the
    // lambda), 3 (the saver), 4 (SignalStopHook, off).
    CHECK(session.checkpoint_saver() == session.hook<3>().get());
    RunCounter& counter = *session.find_hook<RunCounter>();
    for (int i = 0; i < 5; ++i) do_step(session);  // checkpoints at 0, 2, 4
    CHECK(ckpt::read_text(logdir + "/model.ckpt-4.hooks") ==
          "runhooks-hook-states 1\nRunCounter 1 4\nend\n");
    CHECK(counter.restored.empty());  // nothing to restore on the first start
    CHECK(do_step(session) == 5);     // lost at 5: the checkpoint of step 4, with its state
    CHECK(counter.restored == std::vector<std::int64_t>{4});
    CHECK(counter.runs == 5);
    do_step(session);
    session.close();  // the final checkpoint: step 6, 6 runs
  }
  CHECK(ckpt::read_text(logdir + "/model.ckpt-6.hooks") ==
        "runhooks-hook-states 1\nRunCounter 1 6\nend\n");
  {
    auto session = make_training_session({.checkpoint_dir = logdir, .stop_on_signals = false},
                                         factory(), RunCounter{});
    CHECK(session.find_hook<RunCounter>()->restored == std::vector<std::int64_t>{6});
    CHECK(read_gstep(session) == 6);
  }
  // A session without the hook refuses the file that holds its state, naming both.
  CHECK_THROWS_WITH_AS(make_training_session({.checkpoint_dir = logdir, .stop_on_signals = false},
                                             factory()),
                       doctest::Contains("it holds the state of hook 'RunCounter', which this "
                                         "session does not have"),
                       runhooks::CheckpointError);
}
