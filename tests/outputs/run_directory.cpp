// One event file per log directory (issue 17, items 8 and 9): the hooks and outputs writing to one
// directory in a process share one file (EventFileWriterCache, TensorFlow's FileWriterCache), a
// session writes one SessionLog START, and CheckpointSaverHook writes a SessionLog CHECKPOINT per
// save. TensorBoard's EventAccumulator reads the run directory (every file in it, as
// `tensorboard --logdir` does), where a START in a second file would drop the first file's points.

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/checkpoint_backends.hpp"
#include "support/hook_test_support.hpp"
#include "support/run_directory.hpp"

namespace fs = std::filesystem;
using runhooks::EventFileWriterCache;
using runhooks::ManualClock;
using runhooks::SessionLog;
using runhooks::StepCounterHook;
using runhooks::SummaryOutput;
using runhooks::SummarySaverHook;
using Status = runhooks::SessionLog::Status;
using Steps = std::vector<std::int64_t>;

namespace {

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};
struct Accuracy : runhooks::Key<float> {
  static constexpr std::string_view name = "accuracy";
};
struct Weights : runhooks::Key<std::vector<double>> {
  static constexpr std::string_view name = "weights";
};

// +1 global step and 0.01 s of the test's clock per run: StepCounterHook measures 100 steps/s.
struct Model {
  ManualClock clock;
  std::int64_t step = 0;
  void run() {
    clock.advance(0.01);
    ++step;
  }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 0.5f * static_cast<float>(step); }
  float fetch(Accuracy) const { return 0.25f * static_cast<float>(step); }
  std::vector<double> fetch(Weights) const { return {0.5, -1.0, static_cast<double>(step)}; }
};

// (step, value) points for a tag, as TensorBoard returns them.
std::vector<std::pair<std::int64_t, double>> points(const Steps& steps, double per_step) {
  std::vector<std::pair<std::int64_t, double>> out;
  for (const std::int64_t s : steps) out.emplace_back(s, per_step * static_cast<double>(s));
  return out;
}

}  // namespace

TEST_CASE("StepCounterHook(SummaryOutput) and SummarySaverHook in one directory: one file, one START, and TensorBoard shows every point") {
  const hook_test::TempDir dir;
  const fs::path logdir = dir.path() / "run";
  {
    ManualClock clock;
    runhooks::MonitoredSession session(
        Model{.clock = clock},
        StepCounterHook({.every_n_steps = 10}, SummaryOutput(logdir, /*log_line=*/false), clock),
        SummarySaverHook{{.save_steps = 8}, logdir, runhooks::scalars<Loss>,
                         runhooks::histograms<Weights>});
    for (int i = 0; i < 30; ++i) session.run();
    session.close();
  }
  // What was written: the rate at 11 and 21 (TensorFlow's C19), the summaries at 1, 9, 17, 25
  // (TensorFlow's J90), and one START, at the first run's step.
  const run_directory::Events written = run_directory::read_events(logdir);
  CHECK(written.files.size() == 1);
  CHECK(written.session_logs(Status::start) == std::vector<std::pair<std::int64_t, std::string>>{{1, ""}});
  CHECK(written.steps_of("global_step/sec") == Steps{11, 21});
  CHECK(written.steps_of("loss") == Steps{1, 9, 17, 25});
  CHECK(written.steps_of("weights") == Steps{1, 9, 17, 25});

  // TensorBoard, on the run directory: every point of every tag.
  auto seen = run_directory::read_with_tensorboard(logdir, dir.path());
  if (!seen) return;
  CHECK(seen->files == 1);
  CHECK(seen->session_logs == std::vector<std::string>{"1\tSTART"});
  REQUIRE(seen->scalars.count("global_step/sec") == 1);
  CHECK(run_directory::steps(seen->scalars.at("global_step/sec")) == Steps{11, 21});
  for (const auto& [step, rate] : seen->scalars.at("global_step/sec")) CHECK(rate == doctest::Approx(100.0));
  CHECK(seen->scalars["loss"] == points({1, 9, 17, 25}, 0.5));
  CHECK(seen->histograms["weights"] == Steps{1, 9, 17, 25});
}

TEST_CASE("two SummarySaverHooks in one directory: one START, so neither hides the other's points") {
  // TensorFlow writes a START per hook: the second, at the same step, drops the first hook's
  // summaries at that step in TensorBoard.
  const hook_test::TempDir dir;
  const fs::path logdir = dir.path() / "run";
  {
    runhooks::MonitoredSession session(
        Model{},
        SummarySaverHook{{.save_steps = 5}, logdir, runhooks::scalars<Loss>},
        SummarySaverHook{{.save_steps = 3}, logdir, runhooks::scalars<Accuracy>});
    for (int i = 0; i < 10; ++i) session.run();
  }
  const run_directory::Events written = run_directory::read_events(logdir);
  CHECK(written.files.size() == 1);
  CHECK(written.session_logs(Status::start).size() == 1);
  CHECK(written.steps_of("loss") == Steps{1, 6});
  CHECK(written.steps_of("accuracy") == Steps{1, 4, 7, 10});

  auto seen = run_directory::read_with_tensorboard(logdir, dir.path());
  if (!seen) return;
  CHECK(seen->session_logs == std::vector<std::string>{"1\tSTART"});
  CHECK(seen->scalars["loss"] == points({1, 6}, 0.5));
  CHECK(seen->scalars["accuracy"] == points({1, 4, 7, 10}, 0.25));
}

TEST_CASE("one START per session: a second session on a file still open writes its own") {
  const hook_test::TempDir dir;
  const fs::path logdir = dir.path() / "run";
  const auto keep_open = EventFileWriterCache::get(logdir);
  for (const std::int64_t start : {0, 100}) {
    ManualClock clock;
    runhooks::MonitoredSession session(
        Model{.clock = clock, .step = start},
        StepCounterHook({.every_n_steps = 10}, SummaryOutput(logdir, false), clock),
        SummarySaverHook{{.save_steps = 8}, logdir, runhooks::scalars<Loss>});
    for (int i = 0; i < 12; ++i) session.run();
  }
  keep_open->flush();
  const run_directory::Events written = run_directory::read_events(logdir);
  CHECK(written.files.size() == 1);
  CHECK(written.session_logs(Status::start) ==
        std::vector<std::pair<std::int64_t, std::string>>{{1, ""}, {101, ""}});
}

TEST_CASE("EventFileWriterCache: one writer per directory however it is spelled; a new file once all let go") {
  const hook_test::TempDir dir;
  const fs::path logdir = dir.path() / "run";
  fs::path first_file;
  {
    const auto writer = EventFileWriterCache::get(logdir);
    first_file = writer->path();
    CHECK(first_file.parent_path() == logdir);
    CHECK(EventFileWriterCache::get(logdir) == writer);
    CHECK(EventFileWriterCache::get(logdir / "") == writer);
    CHECK(EventFileWriterCache::get(dir.path() / "." / "other" / ".." / "run") == writer);
    fs::create_directory_symlink(logdir, dir.path() / "link");
    CHECK(EventFileWriterCache::get(dir.path() / "link") == writer);
    CHECK(EventFileWriterCache::get(dir.path() / "elsewhere") != writer);
  }
  // Every holder let go: the file is closed, and the directory's next writer makes a new one.
  const auto again = EventFileWriterCache::get(logdir);
  CHECK(again->path() != first_file);
  CHECK(run_directory::read_events(logdir).files.size() == 2);
}

TEST_CASE("EventFileWriterCache: the shared writer takes records from several threads whole") {
  const hook_test::TempDir dir;
  constexpr int threads = 4;
  constexpr int per_thread = 250;
  fs::path file;
  {
    const auto writer = EventFileWriterCache::get(dir.path());
    file = writer->path();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([t, &dir] {
        // Each thread gets the writer itself, as hooks do in their begin().
        const auto mine = EventFileWriterCache::get(dir.path());
        for (int i = 0; i < per_thread; ++i) {
          if (i % 50 == 0) mine->add_checkpoint(i, "thread-" + std::to_string(t));
          else mine->add_scalar("thread-" + std::to_string(t), static_cast<float>(i), i);
        }
      });
    for (auto& worker : workers) worker.join();
  }
  const std::vector<runhooks::Event> events = runhooks::read_event_file(file);
  CHECK(events.size() == 1 + threads * per_thread);
}

TEST_CASE("CheckpointSaverHook writes SessionLog CHECKPOINT after each save to checkpoint_dir's event file") {
  // TensorFlow's hook: add_session_log(SessionLog(status=CHECKPOINT, checkpoint_path=save_path),
  // step) after each save, save_path being <checkpoint_dir>/<basename>, without the step.
  const ckpt::CapturedLog quiet;  // the saves' log lines
  for (const bool async : {false, true}) {
    INFO("async ", async);
    const ckpt::TempDir dir;
    const std::string checkpoint_path = (dir.path / "model.ckpt").string();
    auto run = [&](auto backend) {
      runhooks::MonitoredSession session(
          std::move(backend), runhooks::CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2}));
      for (int i = 0; i < 5; ++i) session.run();
      session.close();
    };
    if (async)
      run(ckpt::SnapshotBackend{});
    else
      run(ckpt::CheckpointedBackend{});
    // Saves at 0 (session creation), 2, 4, and 5 (end).
    const std::vector<std::pair<std::int64_t, std::string>> expected{
        {0, checkpoint_path}, {2, checkpoint_path}, {4, checkpoint_path}, {5, checkpoint_path}};
    const run_directory::Events written = run_directory::read_events(dir.path);
    CHECK(written.files.size() == 1);
    CHECK(written.session_logs(Status::checkpoint) == expected);
    CHECK(written.session_logs(Status::start).empty());  // TensorFlow's checkpoint hook writes none

    auto seen = run_directory::read_with_tensorboard(dir.path, dir.path);
    if (!seen) continue;
    std::vector<std::string> lines;
    for (const auto& [step, path] : expected) lines.push_back(std::to_string(step) + "\tCHECKPOINT\t" + path);
    CHECK(seen->session_logs == lines);
  }
}
