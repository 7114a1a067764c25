// Asynchronous saves: a Snapshottable backend's checkpoints are written on a background thread.
// The step pays only for snapshot(); at most one save is in flight (the next waits, or is skipped
// with a log line); a background error is raised by the next run() or by close(), never lost;
// close() waits for the last save. The backend's writes pass through a gate the test holds.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/monitored_session.hpp>

#include <support/checkpoint_backends.hpp>

using ckpt::MockListener;
using ckpt::SnapshotBackend;
using ckpt::TempDir;
using ckpt::WriteGate;
using runhooks::CheckpointError;
using runhooks::CheckpointSaverHook;
using runhooks::WhenSaveInFlight;
using Names = std::vector<std::string>;

static_assert(runhooks::Snapshottable<SnapshotBackend>);
static_assert(runhooks::Checkpointable<ckpt::CheckpointedBackend> &&
              !runhooks::Snapshottable<ckpt::CheckpointedBackend>);

namespace {

struct QuietLog {
  ckpt::CapturedLog log;
};

// A backend whose gate starts held: the creation save does not finish until the test says so.
SnapshotBackend held_backend(const std::shared_ptr<WriteGate>& gate) {
  SnapshotBackend backend;
  backend.gate = gate;
  gate->hold();
  return backend;
}

}  // namespace

TEST_CASE("async: the step does not wait for the write; after_save comes once it is done") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  MockListener listener;
  runhooks::MonitoredSession session{
      held_backend(gate), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2}, listener)};
  // The creation save (step 0) is being written, and held: the session was created anyway.
  gate->wait_started(1);
  CHECK(listener.counts->before_save == 1);
  CHECK(listener.counts->after_save == 0);
  session.run();  // step 1: no save, and no wait
  CHECK(gate->finished == 0);
  CHECK_FALSE(runhooks::latest_checkpoint(dir.path));  // nothing committed yet
  gate->release();
  while (!session.hook<0>().save_in_flight_finished()) std::this_thread::yield();
  session.run();  // step 2 collects the finished save (after_save), then saves 2
  CHECK(listener.counts->after_save == 1);
  CHECK(listener.counts->before_save == 2);
  session.close();  // waits for step 2's save
  CHECK(*listener.counts == ckpt::ListenerCounts{.begin = 1, .before_save = 2, .after_save = 2, .end = 1});
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-0", "model.ckpt-2"});
  CHECK(*session.raw_session().snapshots == 2);
  CHECK(*session.raw_session().saves == 0);  // backend.save() is for synchronous saves only
}

TEST_CASE("async: a save while one is in flight waits for it (when_save_in_flight = wait)") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  runhooks::MonitoredSession session{
      held_backend(gate), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
  session.run();  // step 1
  std::atomic<bool> ran{false};
  std::thread runner([&] {
    session.run();  // step 2: must wait for step 0's write
    ran = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(ran.load());
  gate->release();
  runner.join();
  CHECK(ran.load());
  session.close();
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-0", "model.ckpt-2"});
}

TEST_CASE("async: or is skipped with a log line (when_save_in_flight = skip)") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  runhooks::MonitoredSession session{
      held_backend(gate),
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2,
                           .when_save_in_flight = WhenSaveInFlight::skip})};
  session.run();
  session.run();  // step 2: skipped, step 0 still in flight
  CHECK(quiet.log.contains("CheckpointSaverHook skipped the checkpoint of step 2: the save of step 0 "
                           "is still being written."));
  gate->release();
  while (!session.hook<0>().save_in_flight_finished()) std::this_thread::yield();
  session.run();  // 3
  session.run();  // 4: saved
  session.run();  // 5
  session.close();  // 5 was not saved: the final save
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-0", "model.ckpt-4", "model.ckpt-5"});
}

TEST_CASE("async: a background error is raised by the next run(), once, and the state stays") {
  QuietLog quiet;
  TempDir dir;
  SnapshotBackend backend;
  auto gate = backend.gate;
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator([gate] {
        SnapshotBackend b;
        b.gate = gate;
        return b;
      }, {.checkpoint_dir = dir.str()}),
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
  gate->wait_finished(1);  // step 0 saved
  {
    std::lock_guard lock(gate->mutex);
    gate->error = "no space left";
  }
  session.run();
  session.run();  // step 2: its save fails in the background
  auto& hook = session.hook<0>();
  while (!hook.save_in_flight_finished()) std::this_thread::yield();
  CHECK_THROWS_WITH_AS(session.run(),
                       ("runhooks: saving checkpoint '" + (dir / "model.ckpt-2").string() +
                        "' failed: no space left")
                           .c_str(),
                       CheckpointError);
  CHECK(ckpt::latest_step(dir.path) == 0);
  CHECK(ckpt::files_in_but_events(dir.path) == Names{"checkpoint", "model.ckpt-0.arrays"});
}

TEST_CASE("async: close() waits for the last save and raises its error") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  runhooks::MonitoredSession session{
      held_backend(gate), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 100})};
  session.run();
  {
    std::lock_guard lock(gate->mutex);
    gate->error = "the disk went away";
  }
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate->release();
  });
  CHECK_THROWS_WITH_AS(session.close(), doctest::Contains("failed: the disk went away"),
                       CheckpointError);
  releaser.join();
  CHECK(gate->finished == 1);
  CHECK_FALSE(runhooks::latest_checkpoint(dir.path));
}

TEST_CASE("async: the final save in end() is complete when close() returns") {
  QuietLog quiet;
  TempDir dir;
  {
    runhooks::MonitoredSession session{
        SnapshotBackend{}, CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 100})};
    for (int i = 0; i < 7; ++i) session.run();
  }
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-0", "model.ckpt-7"});
  CHECK(ckpt::latest_step(dir.path) == 7);
}

TEST_CASE("async: async_save = false saves a Snapshottable backend synchronously") {
  QuietLog quiet;
  TempDir dir;
  runhooks::MonitoredSession session{
      SnapshotBackend{},
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1, .async_save = false})};
  session.run();
  CHECK(ckpt::latest_step(dir.path) == 1);  // committed before run() returned
  CHECK(*session.raw_session().snapshots == 0);
  CHECK(*session.raw_session().saves == 2);
}

TEST_CASE("async: a recovery waits for the save in flight before saving the new backend") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  bool lost = false;
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator([&] {
        SnapshotBackend b;
        b.gate = gate;
        if (!lost) b.throw_at(3, runhooks::AbortedError("preempted"));
        lost = true;
        return b;
      }, {.checkpoint_dir = dir.str()}),
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
  session.run();
  session.run();  // step 2, saved in the background
  session.run();  // aborts: the new backend restores 2 (the save finished first), replay: 3
  CHECK(session.raw_session().global_step() == 3);
  CHECK(*session.raw_session().restores == 1);
  session.close();
  CHECK(ckpt::latest_step(dir.path) == 3);
}

TEST_CASE("async: a failed save nobody collected is logged when the hook goes away") {
  ckpt::CapturedLog log;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  try {
    runhooks::MonitoredSession session{
        held_backend(gate), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 100})};
    {
      std::lock_guard lock(gate->mutex);
      gate->error = "lost";
    }
    gate->release();
    while (!session.hook<0>().save_in_flight_finished()) std::this_thread::yield();
    throw std::runtime_error("the loop failed");  // the session closes without end()
  } catch (const std::runtime_error&) {
  }
  CHECK(log.contains("CheckpointSaverHook: a background save failed after the last run() and no "
                     "close() raised it: runhooks: saving checkpoint"));
}
