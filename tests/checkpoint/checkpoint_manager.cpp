// CheckpointManager: TensorFlow's names and retention (Saver's max_to_keep and
// keep_checkpoint_every_n_hours), the atomic commit, retention across restarts, re-saving a step
// the state already names, and the clean-up of what a killed save leaves. Killing real processes
// mid-save is tests/checkpoint/checkpoint_faults.cpp. Dropped checkpoints deleted in the background
// (DeleteDropped::in_background): after the commit, before the next operation.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <runhooks/checkpoint/checkpoint_manager.hpp>

#include <support/checkpoint_backends.hpp>

using ckpt::TempDir;
using ckpt::put_text;
using runhooks::CheckpointError;
using runhooks::CheckpointManager;
using runhooks::CheckpointManagerOptions;
using Names = std::vector<std::string>;

namespace {

void save(CheckpointManager& manager, std::int64_t step, double timestamp = 1000.0) {
  manager.save(step, timestamp, ckpt::arrays_writer(step));
}

Names arrays_files(const TempDir& dir) {
  Names names;
  for (const std::string& name : ckpt::files_in(dir.path))
    if (name != "checkpoint") names.push_back(name);
  return names;
}


}  // namespace

TEST_CASE("checkpoint manager: TensorFlow's names, and nothing else left in the directory") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path});
  manager.open(1000.0);
  CHECK(manager.prefix_for(100) == dir / "model.ckpt-100");
  save(manager, 0);
  save(manager, 100);
  CHECK(ckpt::files_in(dir.path) ==
        Names{"checkpoint", "model.ckpt-0.arrays", "model.ckpt-100.arrays"});
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-0", "model.ckpt-100"});
  CHECK(runhooks::latest_checkpoint(dir.path) == dir / "model.ckpt-100");
  CHECK(ckpt::latest_step(dir.path) == 100);
  CHECK(manager.latest() == dir / "model.ckpt-100");
}

TEST_CASE("checkpoint manager: max_to_keep keeps the newest saves and deletes the others") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 3});
  for (std::int64_t step = 0; step < 8; ++step) save(manager, step, 1000.0 + static_cast<double>(step));
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-5", "model.ckpt-6", "model.ckpt-7"});
  CHECK(arrays_files(dir) == Names{"model.ckpt-5.arrays", "model.ckpt-6.arrays", "model.ckpt-7.arrays"});
  const auto state = runhooks::read_checkpoint_state(dir.path);
  CHECK(state->all_model_checkpoint_timestamps == std::vector<double>{1005.0, 1006.0, 1007.0});
  CHECK_FALSE(state->last_preserved_timestamp);  // only with keep_checkpoint_every_n_hours
}

TEST_CASE("checkpoint manager: the default keeps 5") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path});
  for (std::int64_t step = 0; step < 7; ++step) save(manager, step);
  CHECK(ckpt::named_checkpoints(dir.path).size() == 5);
  CHECK(arrays_files(dir).size() == 5);
}

TEST_CASE("checkpoint manager: max_to_keep = 0 keeps every file, the state names only the latest") {
  // TensorFlow's Saver with max_to_keep=0 (or None): nothing deleted, last_checkpoints empty,
  // so the state file's list holds model_checkpoint_path alone.
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 0});
  for (std::int64_t step = 0; step < 7; ++step) save(manager, step);
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-6"});
  CHECK(arrays_files(dir).size() == 7);
}

TEST_CASE("checkpoint manager: keep_checkpoint_every_n_hours, as TensorFlow's Saver") {
  // Saver: the mark starts at the saver's creation + N hours; each checkpoint leaving the
  // max_to_keep window is kept (no longer named) if dated after the mark, which then moves on by
  // N hours. Saves every 1000 s from t = 0, N = 1 h, max_to_keep = 2: the windows drop the saves
  // at 0, 1000, 2000, 3000 (deleted), 4000 (> 3600: kept, mark 7200), 5000..7000 (deleted),
  // 8000 (> 7200: kept, mark 10800).
  TempDir dir;
  CheckpointManager manager(
      {.checkpoint_dir = dir.path, .max_to_keep = 2, .keep_checkpoint_every_n_hours = 1.0});
  manager.open(0.0);
  for (std::int64_t step = 0; step <= 10; ++step) save(manager, step, 1000.0 * static_cast<double>(step));
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-9", "model.ckpt-10"});
  CHECK(arrays_files(dir) == Names{"model.ckpt-10.arrays", "model.ckpt-4.arrays",
                                   "model.ckpt-8.arrays", "model.ckpt-9.arrays"});
  CHECK(runhooks::read_checkpoint_state(dir.path)->last_preserved_timestamp == 7200.0);
}

TEST_CASE("checkpoint manager: retention carries on after a restart (the state file is the record)") {
  TempDir dir;
  {
    CheckpointManager first({.checkpoint_dir = dir.path, .max_to_keep = 3});
    for (std::int64_t step = 0; step < 4; ++step) save(first, step);
  }
  CHECK(arrays_files(dir) == Names{"model.ckpt-1.arrays", "model.ckpt-2.arrays", "model.ckpt-3.arrays"});
  CheckpointManager second({.checkpoint_dir = dir.path, .max_to_keep = 3});
  second.open(2000.0);
  CHECK(second.checkpoints().size() == 3);
  save(second, 4);
  save(second, 5);
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-3", "model.ckpt-4", "model.ckpt-5"});
  CHECK(arrays_files(dir) == Names{"model.ckpt-3.arrays", "model.ckpt-4.arrays", "model.ckpt-5.arrays"});
  second.close();  // a restart: one writer at a time

  SUBCASE("a smaller max_to_keep after the restart drops all the excess at the next save") {
    CheckpointManager third({.checkpoint_dir = dir.path, .max_to_keep = 1});
    save(third, 6);
    CHECK(arrays_files(dir) == Names{"model.ckpt-6.arrays"});
  }
  SUBCASE("the keep_checkpoint_every_n_hours mark survives too") {
    CheckpointManager third({.checkpoint_dir = dir.path, .keep_checkpoint_every_n_hours = 2.0});
    third.open(5000.0);
    save(third, 6, 5000.0);
    CHECK(runhooks::read_checkpoint_state(dir.path)->last_preserved_timestamp == 5000.0);
    third.close();
    CheckpointManager fourth({.checkpoint_dir = dir.path, .keep_checkpoint_every_n_hours = 2.0});
    fourth.open(9000.0);  // later: the mark read from the state file, not this `now`
    save(fourth, 7, 9000.0);
    CHECK(runhooks::read_checkpoint_state(dir.path)->last_preserved_timestamp == 5000.0);
  }
}

TEST_CASE("checkpoint manager: re-saving a step the state names replaces it, never unnamed") {
  // After a restore at step 3 the creation save writes model.ckpt-3 again.
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path});
  save(manager, 2);
  save(manager, 3);
  manager.save(3, 1001.0, [](const std::filesystem::path& prefix) {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", std::int64_t{33});
    out.close();
  });
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-2", "model.ckpt-3"});
  CHECK(ckpt::step_in(dir / "model.ckpt-3") == 33);
  CHECK(arrays_files(dir) == Names{"model.ckpt-2.arrays", "model.ckpt-3.arrays"});
  // An older step named again moves to the end: it is the latest save (TensorFlow's Saver).
  save(manager, 2);
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-3", "model.ckpt-2"});
  CHECK(runhooks::latest_checkpoint(dir.path) == dir / "model.ckpt-2");
}

TEST_CASE("checkpoint manager: a save that fails leaves the state and its checkpoints as they were") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path});
  save(manager, 1);
  const std::string state_before = ckpt::read_text(dir / "checkpoint");
  SUBCASE("the backend throws after writing part of it") {
    CHECK_THROWS_WITH_AS(
        manager.save(2, 1000.0,
                     [](const std::filesystem::path& prefix) {
                       runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
                       out.add("global_step", std::int64_t{2});
                       throw std::runtime_error("disk on fire");
                     }),
        ("runhooks: saving checkpoint '" + (dir / "model.ckpt-2").string() +
         "' failed: disk on fire").c_str(),
        CheckpointError);
  }
  SUBCASE("the backend writes nothing") {
    CHECK_THROWS_WITH_AS(manager.save(2, 1000.0, [](const std::filesystem::path&) {}),
                         doctest::Contains("wrote no file whose name starts with that prefix"),
                         CheckpointError);
  }
  SUBCASE("a file name the prefix rule cannot tell from another checkpoint's") {
    CHECK_THROWS_WITH_AS(manager.save(2, 1000.0,
                                      [](const std::filesystem::path& prefix) {
                                        put_text(prefix.string() + "0.bin", "x");
                                      }),
                         doctest::Contains("the prefix followed by a non-digit"), CheckpointError);
  }
  CHECK(ckpt::read_text(dir / "checkpoint") == state_before);
  CHECK(ckpt::files_in(dir.path) == Names{"checkpoint", "model.ckpt-1.arrays"});
  CHECK(ckpt::latest_step(dir.path) == 1);
}

TEST_CASE("checkpoint manager: open() removes what a killed save left") {
  TempDir dir;
  {
    CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 2});
    save(manager, 1);
    save(manager, 2);
  }
  const std::string token = "0123456789abcdef";
  // Killed after linking step 3's files, before the state named them.
  put_text(dir / (".model.ckpt-3.tmp-" + token + ".arrays"), "partial");
  std::filesystem::create_hard_link(dir / (".model.ckpt-3.tmp-" + token + ".arrays"),
                                    dir / "model.ckpt-3.arrays");
  // Killed while the backend was writing step 4.
  put_text(dir / (".model.ckpt-4.tmp-fedcba9876543210.arrays"), "partial");
  // Killed after the state stopped naming step 1, before its files were deleted.
  auto state = *runhooks::read_checkpoint_state(dir.path);
  state.pending_deletions = {"model.ckpt-0"};
  runhooks::write_checkpoint_state(dir.path, state);
  put_text(dir / "model.ckpt-0.arrays", "old");
  // A temporary state file and a write probe.
  put_text(dir / "checkpoint.tmp-0123456789abcdef", "half");
  put_text(dir / ".runhooks-probe-0123456789abcdef", "x");
  // Not ours: kept.
  put_text(dir / "notes.txt", "mine");
  put_text(dir / "model.ckpt-7.arrays", "an unnamed checkpoint (kept every n hours?)");

  CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 2});
  manager.open(1000.0);
  CHECK(ckpt::files_in(dir.path) == Names{"checkpoint", "model.ckpt-1.arrays", "model.ckpt-2.arrays",
                                          "model.ckpt-7.arrays", "notes.txt"});
}

TEST_CASE("checkpoint manager: open() keeps the user's files named like runhooks' temporaries") {
  // runhooks' temporaries end in exactly 16 lowercase hex digits (detail::unique_token), a staging
  // file's followed by what the backend wrote; before issue 29 the sweep deleted any
  // checkpoint.tmp-*, any .runhooks-probe-* and any .<basename>-<N>.tmp- followed by 16 characters.
  TempDir outside;
  TempDir dir;
  const Names users = {
      "checkpoint.tmp-notes.txt",
      "checkpoint.tmp-0123456789abcdef.bak",
      "checkpoint.tmp-0123456789ABCDEF",
      ".runhooks-probe-mine",
      ".runhooks-probe-0123456789abcdef~",
      ".model.ckpt-3.tmp-notes-for-later.txt",
      ".model.ckpt-3.tmp-0123456789ABCDEF.arrays",
      ".model.ckpt-3.tmp-0123456789abcde.arrays",
      ".model.ckpt-03.tmp-0123456789abcdef.arrays",
      ".model.ckpt-.tmp-0123456789abcdef.arrays",
  };
  for (const std::string& name : users) put_text(dir / name, "mine");
  // A directory at a temporary's exact name is not a file runhooks made either.
  std::filesystem::create_directory(dir / "checkpoint.tmp-00112233445566ff");
  put_text(dir / "checkpoint.tmp-00112233445566ff" / "inside", "mine");
  // Links planted at exact temporary names: removing one never touches its target.
  put_text(outside / "target", "the user's data");
  std::filesystem::create_symlink(outside / "target", dir / ".runhooks-probe-0123456789abcdef");
  std::filesystem::create_symlink(outside / "target", dir / ".model.ckpt-5.tmp-0123456789abcdef.arrays");
  // runhooks' own leftovers, all of them removed: a staging file's suffix is the backend's, any.
  put_text(dir / "checkpoint.tmp-fedcba9876543210", "half");
  put_text(dir / ".model.ckpt-4.tmp-fedcba9876543210", "partial");
  put_text(dir / ".model.ckpt-4.tmp-fedcba98765432100", "partial");
  put_text(dir / ".model.ckpt--4.tmp-fedcba9876543210.arrays", "partial");
  put_text(dir / ".model.ckpt-0.tmp-fedcba9876543210.arrays", "partial");

  CheckpointManager manager({.checkpoint_dir = dir.path});
  manager.open(1000.0);
  Names expected = users;
  expected.push_back("checkpoint.tmp-00112233445566ff");
  std::sort(expected.begin(), expected.end());
  CHECK(ckpt::files_in(dir.path) == expected);
  for (const std::string& name : users) CHECK(ckpt::read_text(dir / name) == "mine");
  CHECK(ckpt::read_text(dir / "checkpoint.tmp-00112233445566ff" / "inside") == "mine");
  CHECK(ckpt::read_text(outside / "target") == "the user's data");
}

TEST_CASE("checkpoint manager: a staging copy the state names (killed while replacing) is kept") {
  TempDir dir;
  const std::string stage = ".model.ckpt-3.tmp-0123456789abcdef";
  runhooks::FlatArrayWriter out(dir / (stage + ".arrays"));
  out.add("global_step", std::int64_t{3});
  out.close();
  runhooks::write_checkpoint_state(
      dir.path, {.model_checkpoint_path = stage,
                 .all_model_checkpoint_paths = {stage},
                 .all_model_checkpoint_timestamps = {1.0},
                 .last_preserved_timestamp = std::nullopt,
                 .pending_deletions = {"model.ckpt-3"},
                 .file_suffixes = {}});
  put_text(dir / "model.ckpt-3.arrays", "half-replaced");
  CheckpointManager manager({.checkpoint_dir = dir.path});
  manager.open(1000.0);
  CHECK(ckpt::files_in(dir.path) == Names{stage + ".arrays", "checkpoint"});
  CHECK(ckpt::latest_step(dir.path) == 3);
  save(manager, 3);  // the next save at that step takes its proper name back
  CHECK(ckpt::files_in(dir.path) == Names{"checkpoint", "model.ckpt-3.arrays"});
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-3"});
}

TEST_CASE("checkpoint manager: bad options and unusable directories") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(CheckpointManager({.checkpoint_dir = dir.path, .basename = "a/b"}),
                       doctest::Contains("got 'a/b'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(CheckpointManager({.checkpoint_dir = dir.path, .basename = "checkpoint"}),
                       doctest::Contains("not 'checkpoint'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(CheckpointManager({.checkpoint_dir = dir.path, .max_to_keep = -1}),
                       "runhooks: max_to_keep must be at least 0, got -1.", std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      CheckpointManager({.checkpoint_dir = dir.path, .keep_checkpoint_every_n_hours = 0.0}),
      doctest::Contains("keep_checkpoint_every_n_hours must be greater than 0"),
      std::invalid_argument);
  CHECK_THROWS_AS(CheckpointManager({.checkpoint_dir = ""}), std::invalid_argument);

  put_text(dir / "file", "a regular file");
  CheckpointManager through_file({.checkpoint_dir = dir / "file" / "ckpt"});
  CHECK_THROWS_WITH_AS(through_file.open(0.0),
                       doctest::Contains(("cannot create the checkpoint directory '" +
                                          (dir / "file" / "ckpt").string() + "'")
                                             .c_str()),
                       CheckpointError);
  CheckpointManager created({.checkpoint_dir = dir / "a" / "b" / "c"});
  created.open(0.0);
  CHECK(std::filesystem::is_directory(dir / "a" / "b" / "c"));
}

TEST_CASE("checkpoint manager: DeleteDropped::in_background commits, returns, and leaves the "
          "dropped checkpoint to a thread that the next save waits for") {
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 2});
  save(manager, 1);
  save(manager, 2);
  ckpt::OtherThreadsGate gate;  // holds the deleter at its first unlink
  manager.save(3, 1000.0, ckpt::arrays_writer(3), runhooks::DeleteDropped::in_background);
  // Committed: the state names 2 and 3 and records 1 as pending; 1's file is still there.
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-2", "model.ckpt-3"});
  CHECK(runhooks::read_checkpoint_state(dir.path)->pending_deletions == Names{"model.ckpt-1"});
  CHECK(arrays_files(dir) == Names{"model.ckpt-1.arrays", "model.ckpt-2.arrays", "model.ckpt-3.arrays"});
  gate.wait_held(1);
  CHECK(manager.deleting());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.release();
  });
  save(manager, 4);  // waits for the deletion of 1 before it touches the directory; drops 2 now
  releaser.join();
  CHECK(gate.owner_while_held() == 0);
  CHECK_FALSE(manager.deleting());
  CHECK(arrays_files(dir) == Names{"model.ckpt-3.arrays", "model.ckpt-4.arrays"});
  // The state save 4 committed knew 1 was gone (and 2, deleted after that commit, pending);
  // close() records that nothing is.
  CHECK(runhooks::read_checkpoint_state(dir.path)->pending_deletions == Names{"model.ckpt-2"});
  manager.close();
  CHECK(runhooks::read_checkpoint_state(dir.path)->pending_deletions.empty());
}

TEST_CASE("checkpoint manager: close() waits for a deletion in the background and records it") {
  TempDir dir;
  {
    CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
    save(manager, 1);
    ckpt::OtherThreadsGate gate;
    manager.save(2, 1000.0, ckpt::arrays_writer(2), runhooks::DeleteDropped::in_background);
    gate.wait_held(1);
    CHECK(arrays_files(dir) == Names{"model.ckpt-1.arrays", "model.ckpt-2.arrays"});
    gate.release();
    manager.close();
    CHECK(arrays_files(dir) == Names{"model.ckpt-2.arrays"});
    CHECK(runhooks::read_checkpoint_state(dir.path)->pending_deletions.empty());
  }
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-2"});
}

TEST_CASE("checkpoint manager: a dropped file the deleter cannot remove stays pending, and the "
          "next save removes it") {
  ckpt::CapturedLog log;
  TempDir dir;
  CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
  save(manager, 1);
  {
    ckpt::OtherThreadsGate gate;
    gate.refuse_others();  // the deleter's unlink fails
    manager.save(2, 1000.0, ckpt::arrays_writer(2), runhooks::DeleteDropped::in_background);
    manager.wait_for_deletions();
  }
  CHECK(log.contains("model.ckpt-1.arrays"));
  CHECK(log.contains("(the next save tries again)"));
  CHECK(arrays_files(dir) == Names{"model.ckpt-1.arrays", "model.ckpt-2.arrays"});
  save(manager, 3);
  CHECK(arrays_files(dir) == Names{"model.ckpt-3.arrays"});
  manager.close();
  CHECK(runhooks::read_checkpoint_state(dir.path)->pending_deletions.empty());
}
