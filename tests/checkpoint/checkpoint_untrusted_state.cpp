// The state file is untrusted input (issue 17): what TensorFlow writes (absolute paths,
// un-stepped prefixes) and what a damaged or hostile file says must never make the manager delete
// a file that is not provably one checkpoint's own inside its directory; a relative and an
// absolute spelling of one checkpoint are one checkpoint; one writer per directory; no stale
// pending-deletion line after a clean end. tests/checkpoint_deletion_property.cpp checks the same
// rules on random directories and state files.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/log.hpp>

#include <support/checkpoint_backends.hpp>

namespace fs = std::filesystem;
using ckpt::TempDir;
using ckpt::CapturedLog;
using ckpt::put_text;
using runhooks::CheckpointError;
using runhooks::CheckpointManager;
using runhooks::CheckpointState;
using Names = std::vector<std::string>;

namespace {

// TensorFlow's three files of a V2 checkpoint at `prefix`.
void put_tf_checkpoint(const fs::path& prefix) {
  put_text(prefix.string() + ".index", "index");
  put_text(prefix.string() + ".data-00000-of-00001", "data");
  put_text(prefix.string() + ".meta", "meta");
}

}  // namespace

TEST_CASE("untrusted state: dropping an un-stepped prefix deletes only TensorFlow's files of it") {
  // What Saver.save(sess, dir + "/model.ckpt") without global_step leaves: an absolute path.
  TempDir dir;
  put_tf_checkpoint(dir / "model.ckpt");
  put_text(dir / "model.ckpt-notes.txt", "the user's");
  put_text(dir / "model.ckpt.backup", "the user's");
  runhooks::write_checkpoint_state(
      dir.path, CheckpointState{.model_checkpoint_path = (dir / "model.ckpt").string(),
                                .all_model_checkpoint_paths = {(dir / "model.ckpt").string()},
                                .all_model_checkpoint_timestamps = {},
                                .last_preserved_timestamp = std::nullopt,
                                .pending_deletions = {},
                                .file_suffixes = {}});
  {
    CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 2});
    manager.save(30, 1000.0, ckpt::arrays_writer(30));
    manager.save(40, 1001.0, ckpt::arrays_writer(40));  // drops model.ckpt
  }
  CHECK(ckpt::files_in(dir.path) == Names{"checkpoint", "model.ckpt-30.arrays", "model.ckpt-40.arrays",
                                          "model.ckpt-notes.txt", "model.ckpt.backup"});
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-30", "model.ckpt-40"});
  CHECK(ckpt::latest_step(dir.path) == 40);
}

TEST_CASE("untrusted state: an absolute spelling of a checkpoint here is that checkpoint") {
  TempDir dir;
  ckpt::arrays_writer(30)(dir / "model.ckpt-30");
  runhooks::write_checkpoint_state(
      dir.path,
      CheckpointState{.model_checkpoint_path = (dir / "model.ckpt-30").string(),
                      .all_model_checkpoint_paths = {(dir / "model.ckpt-20").string(), "model.ckpt-20",
                                                     (dir / "model.ckpt-30").string()},
                      .all_model_checkpoint_timestamps = {},
                      .last_preserved_timestamp = std::nullopt,
                      .pending_deletions = {},
                      .file_suffixes = {}});
  ckpt::arrays_writer(20)(dir / "model.ckpt-20");
  CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 2});
  manager.open(1000.0);
  REQUIRE(manager.checkpoints().size() == 2);  // one entry per checkpoint, however spelt
  CHECK(manager.checkpoints()[0].name == "model.ckpt-20");
  CHECK(manager.checkpoints()[1].name == "model.ckpt-30");

  // The creation save after restoring step 30 re-saves step 30: killed at any file operation, the
  // directory still holds a complete checkpoint that the state names.
  manager.save(30, 1001.0, ckpt::arrays_writer(30));
  CHECK(ckpt::named_checkpoints(dir.path) == Names{"model.ckpt-20", "model.ckpt-30"});
  CHECK(ckpt::latest_step(dir.path) == 30);
}

namespace {

// Simulates a process killed at the n-th file operation (durable_files.hpp's gate).
struct KillAt {
  static inline std::atomic<int> remaining{-1};
  explicit KillAt(int n) {
    remaining = n;
    runhooks::detail::file_operation_gate() = [] () noexcept { return remaining.fetch_sub(1) > 0; };
  }
  ~KillAt() { runhooks::detail::file_operation_gate() = nullptr; }
  static bool killed() { return remaining.load() < 0; }
};

}  // namespace

TEST_CASE("untrusted state: re-saving a restored step named by an absolute path, killed anywhere") {
  CapturedLog quiet;  // the killed managers' destructors log that they could not close
  bool reached_the_end = false;
  for (int n = 0; !reached_the_end && n < 200; ++n) {
    CAPTURE(n);
    TempDir dir;
    ckpt::arrays_writer(30)(dir / "model.ckpt-30");
    runhooks::write_checkpoint_state(
        dir.path, CheckpointState{.model_checkpoint_path = (dir / "model.ckpt-30").string(),
                                  .all_model_checkpoint_paths = {(dir / "model.ckpt-30").string()},
                                  .all_model_checkpoint_timestamps = {},
                                  .last_preserved_timestamp = std::nullopt,
                                  .pending_deletions = {},
                                  .file_suffixes = {}});
    {
      KillAt kill(1 << 30);  // outlives the manager: a killed process closes nothing
      CheckpointManager manager({.checkpoint_dir = dir.path});
      manager.open(1000.0);
      KillAt::remaining = n;
      try {
        manager.save(30, 1001.0, ckpt::arrays_writer(30));
      } catch (const CheckpointError&) {
        CHECK(KillAt::killed());
      }
      reached_the_end = !KillAt::killed();
    }
    // The next process resumes from step 30, whole.
    REQUIRE(runhooks::latest_checkpoint(dir.path));
    CHECK(ckpt::latest_step(dir.path) == 30);
    CheckpointManager next({.checkpoint_dir = dir.path});
    next.open(1002.0);
    CHECK(ckpt::latest_step(dir.path) == 30);
    CHECK(next.checkpoints().size() == 1);
  }
  CHECK(reached_the_end);
}

TEST_CASE("untrusted state: names outside the directory, empty or the directory itself delete nothing") {
  TempDir parent;
  const fs::path dir = parent / "ckpt";
  fs::create_directories(dir / "sub");
  fs::create_directories(parent / "elsewhere");
  // Files outside the directory, and in a subdirectory, each named so that a prefix rule would
  // take it.
  const Names outside = {"victim", "victim.index", "ckpt.index", "notes.txt"};
  for (const std::string& name : outside) put_text(parent / name, "outside");
  put_tf_checkpoint(parent / "elsewhere" / "model.ckpt-5");
  put_tf_checkpoint(dir / "sub" / "model.ckpt-6");
  put_text(dir / "notes.txt", "mine");
  // A link inside that leads out: removing the link must not touch its target.
  put_text(parent / "target.index", "target");
  fs::create_symlink(parent / "target.index", dir / "linked.index");
  // And a link to a directory outside, named like a checkpoint path.
  fs::create_directory_symlink(parent / "elsewhere", dir / "out");

  const std::vector<std::string> hostile = {
      "", "../", "..", ".", "../victim", dir.string() + "/", dir.string(), (dir / "sub").string() + "/",
      (parent / "elsewhere" / "model.ckpt-5").string(), "sub/model.ckpt-6", "out/model.ckpt-5",
      (dir / ".." / "victim").string(), "checkpoint", ".runhooks-lock", "linked"};
  CheckpointState state{.model_checkpoint_path = "model.ckpt-1",
                        .all_model_checkpoint_paths = hostile,
                        .all_model_checkpoint_timestamps = {},
                        .last_preserved_timestamp = std::nullopt,
                        .pending_deletions = hostile,
                        .file_suffixes = {{"checkpoint", {""}},
                                          {".runhooks-lock", {""}},
                                          {"notes", {".txt"}},
                                          {"../victim", {""}},
                                          {"model.ckpt-1", {"/../../victim", "0x", ".arrays"}}}};
  state.all_model_checkpoint_paths.push_back("model.ckpt-1");
  ckpt::arrays_writer(1)(dir / "model.ckpt-1");
  runhooks::write_checkpoint_state(dir, state);

  CapturedLog log;
  {
    CheckpointManager manager({.checkpoint_dir = dir, .max_to_keep = 1});
    manager.save(2, 1000.0, ckpt::arrays_writer(2));
    manager.save(3, 1001.0, ckpt::arrays_writer(3));
  }
  for (const std::string& name : outside) CHECK(ckpt::read_text(parent / name) == "outside");
  CHECK(ckpt::read_text(parent / "target.index") == "target");
  CHECK(ckpt::files_in(parent / "elsewhere") ==
        Names{"model.ckpt-5.data-00000-of-00001", "model.ckpt-5.index", "model.ckpt-5.meta"});
  CHECK(ckpt::files_in(dir / "sub") ==
        Names{"model.ckpt-6.data-00000-of-00001", "model.ckpt-6.index", "model.ckpt-6.meta"});
  // Inside: only the own checkpoints' files went (model.ckpt-1 and 2); the link named like one
  // (linked.index, of the entry "linked") is removed, its target kept.
  CHECK(ckpt::files_in(dir) == Names{"checkpoint", "model.ckpt-3.arrays", "notes.txt", "out", "sub"});
  CHECK(ckpt::named_checkpoints(dir) == Names{"model.ckpt-3"});
  CHECK(ckpt::latest_step(dir) == 3);
  // One warning per name that is not a checkpoint here (each was dropped and pending).
  CHECK(log.count("which is not a checkpoint in that directory") >= 1);
  CHECK(log.count("'../'") >= 1);
}

TEST_CASE("untrusted state: a clean end leaves no pending-deletion line") {
  TempDir dir;
  {
    CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
    manager.save(1, 1000.0, ckpt::arrays_writer(1));
    manager.save(2, 1001.0, ckpt::arrays_writer(2));
    CHECK(ckpt::read_text(dir / "checkpoint").find("runhooks-delete") != std::string::npos);
  }
  const std::string state = ckpt::read_text(dir / "checkpoint");
  CHECK(state.find("runhooks-delete") == std::string::npos);
  CHECK(state.find("# runhooks-files: \"model.ckpt-2\", \".arrays\"") != std::string::npos);
  CHECK(ckpt::files_in(dir.path) == Names{"checkpoint", "model.ckpt-2.arrays"});
}

TEST_CASE("untrusted state: the suffixes a backend wrote are deleted with it, nothing else") {
  TempDir dir;
  const auto custom = [](std::int64_t step) {
    return [step](const fs::path& prefix) {
      put_text(prefix.string() + ".json", std::to_string(step));
      put_text(prefix.string(), "bare prefix");
    };
  };
  {
    CheckpointManager manager({.checkpoint_dir = dir.path, .max_to_keep = 1});
    manager.save(1, 1000.0, custom(1));
    put_text(dir / "model.ckpt-1.json.bak", "the user's copy");
    put_text(dir / "model.ckpt-1-notes", "the user's notes");
    CapturedLog log;
    manager.save(2, 1001.0, custom(2));
    CHECK(log.count("left 'model.ckpt-1-notes', 'model.ckpt-1.json.bak' in place") == 1);
  }
  CHECK(ckpt::files_in(dir.path) == Names{"checkpoint", "model.ckpt-1-notes", "model.ckpt-1.json.bak",
                                          "model.ckpt-2", "model.ckpt-2.json"});
}

TEST_CASE("untrusted state: one writer per directory") {
  TempDir dir;
  CheckpointManager first({.checkpoint_dir = dir.path});
  first.open(1000.0);
  CheckpointManager second({.checkpoint_dir = dir.path});
  const std::string holder = "already has a writer (this process, pid " + std::to_string(::getpid());
  CHECK_THROWS_WITH_AS(second.open(1000.0), doctest::Contains(holder.c_str()), CheckpointError);
  CHECK_THROWS_WITH_AS(second.save(1, 1000.0, ckpt::arrays_writer(1)), doctest::Contains("one writer at a time"),
                       CheckpointError);
  // Readers take no lock.
  first.save(1, 1000.0, ckpt::arrays_writer(1));
  CHECK(ckpt::latest_step(dir.path) == 1);
  // The lock goes with its holder.
  first.close();
  second.open(1001.0);
  second.save(2, 1001.0, ckpt::arrays_writer(2));
  CHECK(ckpt::latest_step(dir.path) == 2);
}

TEST_CASE("untrusted state: which file names belong to a checkpoint") {
  using runhooks::detail::is_known_checkpoint_suffix;
  using runhooks::detail::own_checkpoint_name;
  CHECK(is_known_checkpoint_suffix(".index"));
  CHECK(is_known_checkpoint_suffix(".data-00000-of-00001"));
  CHECK(is_known_checkpoint_suffix(".data-00012-of-00100"));
  CHECK(is_known_checkpoint_suffix(".meta"));
  CHECK(is_known_checkpoint_suffix(".arrays"));
  CHECK_FALSE(is_known_checkpoint_suffix(""));
  CHECK_FALSE(is_known_checkpoint_suffix(".data-0-of-1"));
  CHECK_FALSE(is_known_checkpoint_suffix(".data-00000-of-0000x"));
  CHECK_FALSE(is_known_checkpoint_suffix("-40.arrays"));
  CHECK_FALSE(is_known_checkpoint_suffix(".index.bak"));
  TempDir dir;
  const std::string key = runhooks::detail::directory_key(dir.path);
  CHECK(own_checkpoint_name(key, "model.ckpt-3") == "model.ckpt-3");
  CHECK(own_checkpoint_name(key, (dir / "model.ckpt-3").string()) == "model.ckpt-3");
  CHECK(own_checkpoint_name(key, (dir / "x" / ".." / "model.ckpt-3").string()) == "model.ckpt-3");
  CHECK(own_checkpoint_name(key, dir.str() + "//model.ckpt-3") == "model.ckpt-3");
  for (const std::string& bad : {std::string(), std::string("."), std::string(".."), std::string("../a"),
                                 std::string("a/b"), dir.str() + "/", dir.str(), std::string("/a"),
                                 std::string("a\0b", 3)})
    CHECK_FALSE(own_checkpoint_name(key, bad));
}
