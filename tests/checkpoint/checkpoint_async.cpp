// Asynchronous saves: a Snapshottable backend's checkpoints are written on a background thread.
// The step pays only for snapshot(); at most one save is in flight (the next waits, or is skipped
// with a log line); a background error is raised by the next run() or by close(), never lost;
// close() waits for the last save. The backend's writes pass through a gate the test holds.
// A SnapshottableInPlace backend fills the one snapshot the hook keeps, never while it is being
// written.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

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

// ---- SnapshottableInPlace: the hook keeps one snapshot and the backend fills it ----

using ckpt::InPlaceBackend;

static_assert(runhooks::SnapshottableInPlace<InPlaceBackend> &&
              runhooks::SnapshottableByValue<InPlaceBackend> &&
              runhooks::Snapshottable<InPlaceBackend>);
static_assert(std::is_same_v<runhooks::snapshot_t<InPlaceBackend>, InPlaceBackend::Snapshot>);
static_assert(!runhooks::SnapshottableInPlace<SnapshotBackend>);

namespace {

// The var a checkpoint holds (InPlaceBackend's write stores vars[0] as "var").
double var_in(const std::filesystem::path& prefix) {
  return runhooks::FlatArrayReader(prefix.string() + ".arrays").scalar<double>("var");
}

// An InPlaceBackend whose gate starts held.
InPlaceBackend held_in_place(const std::shared_ptr<WriteGate>& gate) {
  InPlaceBackend backend;
  backend.gate = gate;
  gate->hold();
  return backend;
}

}  // namespace

TEST_CASE("in place: every save fills the one snapshot the hook keeps, in its own memory") {
  QuietLog quiet;
  TempDir dir;
  InPlaceBackend backend;
  const auto fills = backend.fills;
  const auto by_value = backend.by_value;
  {
    runhooks::MonitoredSession session{
        std::move(backend), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
    for (int i = 0; i < 6; ++i) {
      session.raw_session().var = 10.0 * (i + 1);  // each step's state differs
      session.run();
    }
  }
  // Saves at 0 (session creation), 2, 4, 6: four fills of one object, never a new snapshot.
  REQUIRE(fills->size() == 4);
  CHECK(*by_value == 0);
  for (const InPlaceBackend::Fill& fill : *fills) CHECK(fill.into == fills->front().into);
  // The first fill made the buffer; every later one found the previous save's contents in it
  // and kept its memory (assign into existing capacity).
  CHECK(fills->at(0).held_step == -1);
  CHECK(fills->at(0).held_data == nullptr);
  CHECK(fills->at(1).held_step == 0);
  CHECK(fills->at(2).held_step == 2);
  CHECK(fills->at(3).held_step == 4);
  for (std::size_t i = 1; i < fills->size(); ++i) CHECK(fills->at(i).held_data == fills->at(0).data);
  CHECK(ckpt::named_checkpoints(dir.path) ==
        Names{"model.ckpt-0", "model.ckpt-2", "model.ckpt-4", "model.ckpt-6"});
  CHECK(ckpt::step_in(dir / "model.ckpt-4") == 4);
  CHECK(var_in(dir / "model.ckpt-4") == 40.0);
  CHECK(var_in(dir / "model.ckpt-6") == 60.0);
}

TEST_CASE("in place: the kept snapshot is not filled again while it is being written (wait)") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  InPlaceBackend backend = held_in_place(gate);
  backend.var = 1.0;
  const auto fills = backend.fills;
  runhooks::MonitoredSession session{
      std::move(backend), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2})};
  gate->wait_started(1);  // step 0's write holds the snapshot
  session.raw_session().var = 2.0;
  session.run();  // step 1
  std::atomic<bool> ran{false};
  std::thread runner([&] {
    session.run();  // step 2: waits for step 0's write before it fills the snapshot again
    ran = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(ran.load());
  CHECK(fills->size() == 1);
  gate->release();
  runner.join();
  CHECK(fills->size() == 2);
  session.close();
  CHECK(ckpt::step_in(dir / "model.ckpt-0") == 0);
  CHECK(var_in(dir / "model.ckpt-0") == 1.0);  // what the snapshot held at step 0, not later
  CHECK(var_in(dir / "model.ckpt-2") == 2.0);
}

TEST_CASE("in place: a save skipped while one is in flight leaves the kept snapshot alone") {
  QuietLog quiet;
  TempDir dir;
  auto gate = std::make_shared<WriteGate>();
  InPlaceBackend backend = held_in_place(gate);
  backend.var = 1.0;
  const auto fills = backend.fills;
  runhooks::MonitoredSession session{
      std::move(backend),
      CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2,
                           .when_save_in_flight = WhenSaveInFlight::skip})};
  session.raw_session().var = 2.0;
  session.run();
  session.run();  // step 2: skipped
  CHECK(fills->size() == 1);
  gate->release();
  session.close();  // waits for step 0, then the final save of step 2
  CHECK(fills->size() == 1);  // end()'s final save is synchronous: save(), not the snapshot
  CHECK(var_in(dir / "model.ckpt-0") == 1.0);
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-0", "model.ckpt-2"});
}

namespace {

// A snapshot type that cannot be default-constructed: the first one comes from snapshot(), the
// later ones are filled in place.
struct NoDefaultSnapshotBackend : ckpt::CheckpointedBackend {
  struct Snapshot {
    explicit Snapshot(std::int64_t s) : step(s) {}
    std::int64_t step;
    void write(const std::filesystem::path& prefix) const { ckpt::arrays_writer(step)(prefix); }
  };
  std::shared_ptr<int> by_value = std::make_shared<int>(0);
  std::shared_ptr<int> in_place = std::make_shared<int>(0);
  Snapshot snapshot() const {
    ++*by_value;
    return Snapshot(step);
  }
  void snapshot(Snapshot& into) const {
    ++*in_place;
    into.step = step;
  }
};
static_assert(runhooks::SnapshottableInPlace<NoDefaultSnapshotBackend>);

}  // namespace

TEST_CASE("in place: a snapshot type without a default constructor is made by snapshot() once") {
  QuietLog quiet;
  TempDir dir;
  NoDefaultSnapshotBackend backend;
  const auto by_value = backend.by_value;
  const auto in_place = backend.in_place;
  {
    runhooks::MonitoredSession session{
        std::move(backend), CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 1})};
    for (int i = 0; i < 3; ++i) session.run();
  }
  CHECK(*by_value == 1);  // the creation save's
  CHECK(*in_place == 3);  // steps 1, 2, 3
  CHECK(ckpt::latest_step(dir.path) == 3);
}
