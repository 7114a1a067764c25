// The checkpoint state file (<dir>/checkpoint): TensorFlow's CheckpointState text format written
// and read, the atomic replacement, latest_checkpoint(). The sample below is what TensorFlow 2.21's
// update_checkpoint_state_internal(save_relative_paths=True) wrote; tools/tf_reference's
// checkpoint_state_interop test also has TensorFlow read what we write, when it is installed.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include <runhooks/checkpoint/checkpoint_state.hpp>

#include <support/checkpoint_backends.hpp>

using ckpt::TempDir;
using ckpt::put_text;
using runhooks::CheckpointError;
using runhooks::CheckpointState;

namespace {

// TensorFlow 2.21: update_checkpoint_state_internal(d, d/model.ckpt-2, [d/model.ckpt-0,
// d/model.ckpt-2], save_relative_paths=True, all_model_checkpoint_timestamps=[1484695987.209386,
// 1484695989.5], last_preserved_timestamp=1484695987.0).
constexpr const char* tf_written =
    "model_checkpoint_path: \"model.ckpt-2\"\n"
    "all_model_checkpoint_paths: \"model.ckpt-0\"\n"
    "all_model_checkpoint_paths: \"model.ckpt-2\"\n"
    "all_model_checkpoint_timestamps: 1484695987.209386\n"
    "all_model_checkpoint_timestamps: 1484695989.5\n"
    "last_preserved_timestamp: 1484695987.0\n";

CheckpointState tf_state() {
  return CheckpointState{.model_checkpoint_path = "model.ckpt-2",
                         .all_model_checkpoint_paths = {"model.ckpt-0", "model.ckpt-2"},
                         .all_model_checkpoint_timestamps = {1484695987.209386, 1484695989.5},
                         .last_preserved_timestamp = 1484695987.0,
                         .pending_deletions = {},
                         .file_suffixes = {}};
}


std::string parse_error(const std::string& text) {
  try {
    runhooks::parse_checkpoint_state(text, "/d/checkpoint");
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint state: TensorFlow's text parses, and ours is TensorFlow's line for line") {
  CHECK((runhooks::parse_checkpoint_state(tf_written) == tf_state()));
  const std::string ours = runhooks::format_checkpoint_state(tf_state());
  const std::string header = "# CheckpointState (TensorFlow text format), written by runhooks\n";
  REQUIRE(ours.substr(0, header.size()) == header);
  CHECK(ours.substr(header.size()) == tf_written);
}

TEST_CASE("checkpoint state: round trip with escapes, pending deletions and no timestamps") {
  const CheckpointState state{
      .model_checkpoint_path = "/abs/dir with \"quotes\"\\and\nnewline-\xc3\xa9",
      .all_model_checkpoint_paths = {"a", "/abs/dir with \"quotes\"\\and\nnewline-\xc3\xa9"},
      .all_model_checkpoint_timestamps = {},
      .last_preserved_timestamp = std::nullopt,
      .pending_deletions = {"model.ckpt-1", "odd \"name\""},
      .file_suffixes = {{"model.ckpt-1", {".arrays", ""}}},
  };
  const std::string text = runhooks::format_checkpoint_state(state);
  CHECK(text.find("\\303\\251") != std::string::npos);  // non-ASCII bytes in octal, as Python
  CHECK((runhooks::parse_checkpoint_state(text) == state));
}

TEST_CASE("checkpoint state: the text format's other spellings") {
  const CheckpointState state = runhooks::parse_checkpoint_state(
      "# a comment\n"
      "model_checkpoint_path: 'model' \".ckpt-\" \"9\"  # trailing comment\n"
      "all_model_checkpoint_paths:\"\\x61\\142\" all_model_checkpoint_paths: 'model.ckpt-9';\n"
      "all_model_checkpoint_timestamps: 1e3, all_model_checkpoint_timestamps: +2.5f\n"
      "last_preserved_timestamp: inf\n");
  CHECK(state.model_checkpoint_path == "model.ckpt-9");
  CHECK(state.all_model_checkpoint_paths == std::vector<std::string>{"ab", "model.ckpt-9"});
  CHECK(state.all_model_checkpoint_timestamps == std::vector<double>{1000.0, 2.5});
  CHECK(std::isinf(*state.last_preserved_timestamp));
}

TEST_CASE("checkpoint state: a damaged file is an error naming the file and line") {
  CHECK(parse_error("model_checkpoint_path: \"a\"\nglobal_step: 3\n") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 2: unknown field 'global_step'.");
  // A field name alone on its line: the line it is on, not the next one.
  CHECK(parse_error("garbage\n") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 1: unknown field 'garbage'.");
  CHECK(parse_error("\n\ngarbage\n") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 3: unknown field 'garbage'.");
  CHECK(parse_error("model_checkpoint_path: \"a\n") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 1: unterminated string.");
  CHECK(parse_error("model_checkpoint_path: \"a\"\nall_model_checkpoint_timestamps: x1\n") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 2: 'x1' is not a number.");
  CHECK(parse_error("all_model_checkpoint_paths: \"a\"\n") ==
        "runhooks: checkpoint state file '/d/checkpoint' has no model_checkpoint_path.");
  CHECK(parse_error("model_checkpoint_path: \"a\" model_checkpoint_path: \"b\"") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 1: model_checkpoint_path appears "
        "twice.");
  CHECK(parse_error("model_checkpoint_path: 3") ==
        "runhooks: checkpoint state file '/d/checkpoint', line 1: expected a quoted string.");
  CHECK(parse_error("") == "runhooks: checkpoint state file '/d/checkpoint' has no "
                           "model_checkpoint_path.");
}

TEST_CASE("checkpoint state: get_checkpoint_state joins relative paths to the directory") {
  TempDir dir;
  put_text(dir / "checkpoint",
           "model_checkpoint_path: \"model.ckpt-2\"\n"
           "all_model_checkpoint_paths: \"/elsewhere/model.ckpt-1\"\n"
           "all_model_checkpoint_paths: \"model.ckpt-2\"\n");
  const auto state = runhooks::get_checkpoint_state(dir.path);
  REQUIRE(state);
  CHECK(state->model_checkpoint_path == (dir / "model.ckpt-2").string());
  CHECK(state->all_model_checkpoint_paths ==
        std::vector<std::string>{"/elsewhere/model.ckpt-1", (dir / "model.ckpt-2").string()});
  CHECK(runhooks::read_checkpoint_state(dir.path)->model_checkpoint_path == "model.ckpt-2");
  CHECK_FALSE(runhooks::get_checkpoint_state(dir / "missing"));
  TempDir empty;
  CHECK_FALSE(runhooks::get_checkpoint_state(empty.path));
}

TEST_CASE("checkpoint state: write_checkpoint_state replaces the file and leaves no temporary") {
  TempDir dir;
  runhooks::write_checkpoint_state(dir.path, tf_state());
  CHECK(ckpt::files_in(dir.path) == std::vector<std::string>{"checkpoint"});
  CheckpointState next = tf_state();
  next.model_checkpoint_path = "model.ckpt-4";
  next.all_model_checkpoint_paths.push_back("model.ckpt-4");
  next.all_model_checkpoint_timestamps.push_back(1484695990.0);
  runhooks::write_checkpoint_state(dir.path, next);
  CHECK(ckpt::files_in(dir.path) == std::vector<std::string>{"checkpoint"});
  CHECK((*runhooks::read_checkpoint_state(dir.path) == next));
  CHECK_THROWS_AS(runhooks::write_checkpoint_state(dir / "missing", next), CheckpointError);
}

TEST_CASE("checkpoint state: latest_checkpoint") {
  TempDir dir;
  CHECK_FALSE(runhooks::latest_checkpoint(dir.path));
  CHECK_FALSE(runhooks::latest_checkpoint(dir / "no such directory"));
  runhooks::write_checkpoint_state(dir.path, tf_state());
  // The state names model.ckpt-2 but nothing of it exists: an error naming both (TensorFlow
  // logs and returns None, and training silently starts again from scratch).
  CHECK_THROWS_WITH_AS(runhooks::latest_checkpoint(dir.path),
                       ("runhooks: checkpoint state file '" + (dir / "checkpoint").string() +
                        "' names checkpoint '" + (dir / "model.ckpt-2").string() +
                        "', but none of its files exists.")
                           .c_str(),
                       CheckpointError);
  put_text(dir / "model.ckpt-20.arrays", "x");  // another checkpoint: not one of model.ckpt-2's
  CHECK_THROWS_AS(runhooks::latest_checkpoint(dir.path), CheckpointError);
  put_text(dir / "model.ckpt-2.arrays", "x");
  CHECK(runhooks::latest_checkpoint(dir.path) == dir / "model.ckpt-2");
  put_text(dir / "checkpoint", "model_checkpoint_path: \"model.ckpt-2\" junk");
  CHECK_THROWS_WITH_AS(runhooks::latest_checkpoint(dir.path), doctest::Contains("line 1"),
                       CheckpointError);
}

TEST_CASE("checkpoint state: which files belong to a checkpoint") {
  using runhooks::detail::belongs_to_prefix;
  CHECK(belongs_to_prefix("model.ckpt-1", "model.ckpt-1"));
  CHECK(belongs_to_prefix("model.ckpt-1.arrays", "model.ckpt-1"));
  CHECK(belongs_to_prefix("model.ckpt-1_optimizer", "model.ckpt-1"));
  CHECK_FALSE(belongs_to_prefix("model.ckpt-10.arrays", "model.ckpt-1"));
  CHECK_FALSE(belongs_to_prefix("model.ckpt-", "model.ckpt-1"));
}
