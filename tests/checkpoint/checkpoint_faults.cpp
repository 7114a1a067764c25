// Faults with real processes (tests/checkpoint/checkpoint_helper.cpp, the demo backend under a
// CheckpointSaverHook and a ChiefSessionCreator):
//   - crash-resume: the helper is SIGKILLed at random instants, saves included, and restarted,
//     RUNHOOKS_CRASH_KILLS times (default 50; `./dev fuzz` runs 1000). After every kill the state
//     file parses, its latest checkpoint restores to exactly what a replay from scratch gives, it
//     is never older than the last save the helper reported durable, retention holds; every
//     restart resumes from that checkpoint;
//   - SIGTERM mid-run: exit 0, every end() ran, the final checkpoint is the last completed step,
//     and a rerun resumes there;
//   - a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored): at session creation, a clear error; in
//     the middle of training, run() raises naming the checkpoint and "File too large", and the
//     state file and the checkpoint it names stay intact.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>

#include <support/checkpoint_backends.hpp>
#include <support/child_process.hpp>

#include "logistic_regression.hpp"


namespace {

namespace fs = std::filesystem;
using ckpt::TempDir;

std::string helper_path() {
  const char* path = std::getenv("RUNHOOKS_CHECKPOINT_HELPER");
  REQUIRE_MESSAGE(path != nullptr,
                  "RUNHOOKS_CHECKPOINT_HELPER must name tests/checkpoint/checkpoint_helper");
  return path;
}

using support::Child;

std::int64_t number_after(const std::string& line, const std::string& prefix) {
  return std::stoll(line.substr(prefix.size()));
}

// What the demo backend is after `steps` steps from scratch, and what checkpoint `prefix` holds.
demo::LogisticRegression fresh_backend(std::size_t extra) {
  const demo::Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
  std::mt19937 rng(2024);
  return demo::LogisticRegression(demo::make_data(true_weights, 4000, rng), 16, 7, extra);
}

// The step the newest checkpoint holds, after checking that it restores to exactly the replay.
std::int64_t check_latest(const fs::path& dir, std::size_t extra, demo::LogisticRegression& replay) {
  const std::optional<fs::path> latest = runhooks::latest_checkpoint(dir);
  if (!latest) return -1;
  demo::LogisticRegression restored = fresh_backend(extra);
  runhooks::restore_checkpoint(restored, *latest);
  const std::int64_t step = restored.global_step();
  REQUIRE(step >= replay.global_step());
  while (replay.global_step() < step) replay.run();
  CHECK(restored.weights() == replay.weights());
  CHECK(restored.extra() == replay.extra());
  // Its name: TensorFlow's, or the staging copy's while a save at the same step replaced it.
  const std::string name = fs::path(*latest).filename().string();
  const std::string proper = "model.ckpt-" + std::to_string(step);
  CHECK_MESSAGE((name == proper || name.rfind("." + proper + ".tmp-", 0) == 0), name);
  return step;
}

// Distinct checkpoint prefixes with files on disk ("model.ckpt-N"), staging files apart.
std::set<std::string> prefixes_on_disk(const fs::path& dir) {
  std::set<std::string> prefixes;
  for (const std::string& name : ckpt::files_in(dir)) {
    if (name.rfind("model.ckpt-", 0) != 0) continue;
    prefixes.insert(name.substr(0, name.find('.', std::string("model.ckpt-").size())));
  }
  return prefixes;
}

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoi(value) : fallback;
}

}  // namespace

TEST_CASE("crash-resume: SIGKILL at random instants, saves included; every restart resumes") {
  const int kills = env_int("RUNHOOKS_CRASH_KILLS", 50);
  const std::size_t extra = 8192;  // 64 KiB of parameters: saves take a while, and get killed
  TempDir dir;
  std::mt19937 rng(static_cast<unsigned>(env_int("RUNHOOKS_CRASH_SEED", 20261123)));
  // A save takes tens of milliseconds (four fsyncs), the first one comes after the start-up: up to
  // 200 ms spans the start, the restore and a few saves.
  std::uniform_real_distribution<double> delay_ms(0.0, 200.0);
  demo::LogisticRegression replay = fresh_backend(extra);
  std::int64_t last_durable = -1;  // the newest save a helper reported durable
  std::int64_t latest = -1;        // the newest checkpoint, checked after the last kill
  int killed_in_saves = 0;
  for (int kill = 0; kill < kills; ++kill) {
    INFO("kill " << kill << " of " << kills << " (RUNHOOKS_CRASH_SEED selects the instants)");
    const bool async = kill % 2 == 1;
    std::vector<std::string> args = {helper_path(), "--checkpoint-dir", dir.str(), "--steps",
                                     "1000000000", "--save-steps", "3", "--extra",
                                     std::to_string(extra)};
    if (async) args.push_back("--async");
    Child child(args);
    child.read_for(delay_ms(rng));
    child.kill(SIGKILL);
    CHECK(WIFSIGNALED(child.wait()));
    child.read_all();
    for (const std::string& line : child.lines()) {
      if (line.rfind("resumed ", 0) == 0) {
        // The restart resumed from the newest checkpoint there was.
        CHECK(number_after(line, "resumed ") == std::max<std::int64_t>(latest, 0));
      } else if (line.rfind("saved ", 0) == 0) {
        last_durable = std::max(last_durable, number_after(line, "saved "));
      }
    }
    // The state file parses, and its checkpoint is complete, never older than a reported save.
    latest = check_latest(dir.path, extra, replay);
    CHECK(latest >= last_durable);
    // Retention: max_to_keep 3 named; on disk, at most one more (being written or deleted).
    const std::vector<std::string> named = ckpt::named_checkpoints(dir.path);
    CHECK(named.size() <= 3);
    const std::set<std::string> on_disk = prefixes_on_disk(dir.path);
    CHECK(on_disk.size() <= 4);
    const std::vector<std::string> files = ckpt::files_in(dir.path);
    killed_in_saves += std::any_of(files.begin(), files.end(), [](const std::string& name) {
      return name.rfind(".model.ckpt-", 0) == 0;  // a staging file: killed inside a save
    });
  }
  MESSAGE(kills << " kills; the newest checkpoint is step " << latest << "; " << killed_in_saves
                << " kills left staging files (killed inside a save)");
  CHECK(latest > 0);
  // A last run to completion cleans up: only the named checkpoints remain.
  Child last({helper_path(), "--checkpoint-dir", dir.str(), "--steps", std::to_string(latest + 7),
              "--extra", std::to_string(extra)});
  last.read_all();
  REQUIRE(WIFEXITED(last.wait()));
  CHECK(WEXITSTATUS(last.wait()) == 0);
  CHECK(last.said("resumed " + std::to_string(latest)));
  CHECK(last.said("finished " + std::to_string(latest + 7)));
  CHECK(check_latest(dir.path, extra, replay) == latest + 7);
  std::vector<std::string> expected{"checkpoint"};
  for (const std::string& name : ckpt::named_checkpoints(dir.path)) expected.push_back(name + ".arrays");
  std::sort(expected.begin(), expected.end());
  CHECK(ckpt::files_in_but_events(dir.path) == expected);
}

TEST_CASE("crash-resume with best checkpoints: SIGKILL between commit and deletion loses nothing") {
  // The helper keeps the best 2 by the demo's Loss (checked every second step; it falls, so each
  // check displaces the oldest best) besides the latest 3 periodic and best saves. A kill may land
  // between a best save's commit and the deletion of the checkpoint it displaced.
  const int kills = std::max(1, env_int("RUNHOOKS_CRASH_KILLS", 50) / 3);
  const std::size_t extra = 1024;
  ckpt::CapturedLog quiet;  // the restores' lines
  TempDir dir;
  int killed_before_deletion = 0;
  std::mt19937 rng(static_cast<unsigned>(env_int("RUNHOOKS_CRASH_SEED", 20261127)));
  std::uniform_real_distribution<double> delay_ms(0.0, 150.0);
  // The replay from scratch, remembered at every step: weights, extra state and Loss.
  struct Replayed {
    demo::Weights weights;
    std::vector<double> extra;
    float loss;
  };
  demo::LogisticRegression replay = fresh_backend(extra);
  std::vector<Replayed> at_step{{replay.weights(), replay.extra(), replay.fetch(demo::Loss{})}};
  const auto replayed = [&](std::int64_t step) -> const Replayed& {
    while (static_cast<std::int64_t>(at_step.size()) <= step) {
      replay.run();
      at_step.push_back({replay.weights(), replay.extra(), replay.fetch(demo::Loss{})});
    }
    return at_step[static_cast<std::size_t>(step)];
  };
  std::int64_t latest = -1;
  for (int kill = 0; kill < kills; ++kill) {
    INFO("kill " << kill << " of " << kills << " (RUNHOOKS_CRASH_SEED selects the instants)");
    std::vector<std::string> args = {helper_path(), "--checkpoint-dir", dir.str(), "--steps",
                                     "1000000000", "--save-steps", "5", "--extra",
                                     std::to_string(extra), "--best", "2"};
    if (kill % 2 == 1) args.push_back("--async");
    Child child(args);
    child.read_for(delay_ms(rng));
    child.kill(SIGKILL);
    CHECK(WIFSIGNALED(child.wait()));
    child.read_all();
    for (const std::string& line : child.lines())
      if (line.rfind("resumed ", 0) == 0)
        CHECK(number_after(line, "resumed ") == std::max<std::int64_t>(latest, 0));
    const std::optional<runhooks::CheckpointState> state = runhooks::read_checkpoint_state(dir.path);
    if (!state) continue;
    // Every checkpoint the state names is whole: it restores to the replay at its step.
    for (const std::string& name : state->all_model_checkpoint_paths) {
      INFO(name);
      demo::LogisticRegression restored = fresh_backend(extra);
      runhooks::restore_checkpoint(restored, dir.path / name);
      const Replayed& expected = replayed(restored.global_step());
      CHECK(restored.weights() == expected.weights);
      CHECK(restored.extra() == expected.extra);
    }
    // The best: at most 2, each named, scored with the replay's Loss at its step.
    CHECK(state->scores.size() <= 2);
    for (const runhooks::CheckpointStateScore& score : state->scores) {
      INFO(score.name);
      CHECK(std::count(state->all_model_checkpoint_paths.begin(),
                       state->all_model_checkpoint_paths.end(), score.name) == 1);
      const std::int64_t step = std::stoll(score.name.substr(std::string("model.ckpt-").size()));
      CHECK(score.score == static_cast<double>(replayed(step).loss));
    }
    killed_before_deletion += !state->pending_deletions.empty();
    latest = ckpt::step_in(dir.path / state->model_checkpoint_path);
    // On disk: what the state names, and at most a save being written and one being deleted.
    CHECK(prefixes_on_disk(dir.path).size() <= state->all_model_checkpoint_paths.size() + 2);
  }
  MESSAGE(kills << " kills; the newest checkpoint is step " << latest << "; "
                << killed_before_deletion << " left a committed state with deletions pending");
  CHECK(latest > 0);
  // A last run to completion: only the named checkpoints remain, the best 2 among them.
  Child last({helper_path(), "--checkpoint-dir", dir.str(), "--steps", std::to_string(latest + 8),
              "--extra", std::to_string(extra), "--best", "2"});
  last.read_all();
  REQUIRE(WIFEXITED(last.wait()));
  CHECK(WEXITSTATUS(last.wait()) == 0);
  std::vector<std::string> expected{"checkpoint"};
  for (const std::string& name : ckpt::named_checkpoints(dir.path)) expected.push_back(name + ".arrays");
  std::sort(expected.begin(), expected.end());
  CHECK(ckpt::files_in_but_events(dir.path) == expected);
  CHECK(runhooks::read_checkpoint_state(dir.path)->scores.size() == 2);
}

TEST_CASE("SIGTERM mid-run: exit 0, every end() ran, the final checkpoint is the last step") {
  TempDir dir;
  for (const bool async : {false, true}) {
    INFO("async " << async);
    fs::remove_all(dir.path);
    std::vector<std::string> args = {helper_path(), "--checkpoint-dir", dir.str(), "--steps",
                                     "1000000000", "--save-steps", "1000", "--step-us", "300"};
    if (async) args.push_back("--async");
    Child child(args);
    while (child.lines().empty()) child.read_for(10);
    child.read_for(30);
    child.kill(SIGTERM);
    child.read_all();
    const int status = child.wait();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    const std::vector<std::string> lines = child.lines();
    REQUIRE(lines.size() >= 5);
    CHECK(lines.back() == "signal SIGTERM");
    const std::int64_t last = number_after(lines[lines.size() - 2], "finished ");
    CHECK(last > 0);
    CHECK(child.said("end checkpoint " + std::to_string(last)));
    CHECK(child.said("end reporter " + std::to_string(last)));
    CHECK(child.said("saved " + std::to_string(last)));
    CHECK(ckpt::latest_step(dir.path) == last);
    // A rerun resumes there.
    Child rerun({helper_path(), "--checkpoint-dir", dir.str(), "--steps", std::to_string(last + 5)});
    rerun.read_all();
    CHECK(WEXITSTATUS(rerun.wait()) == 0);
    CHECK(rerun.said("resumed " + std::to_string(last)));
    CHECK(rerun.said("finished " + std::to_string(last + 5)));
  }
}

TEST_CASE("file-size limit at session creation: a clear error before any training") {
  TempDir dir;
  Child child({helper_path(), "--checkpoint-dir", (dir / "ckpt").string(), "--steps", "10",
               "--fsize-limit", "0"});
  child.read_all();
  const int status = child.wait();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(child.output().find("error: runhooks: the checkpoint directory '" + (dir / "ckpt").string() +
                            "' cannot be written: runhooks: writing '") != std::string::npos);
  CHECK(child.output().find("File too large") != std::string::npos);
  CHECK(child.output().find("resumed") == std::string::npos);
}

TEST_CASE("file-size limit mid-run: run() raises naming the checkpoint; the previous one stays") {
  // The helper sets RLIMIT_FSIZE (16 KiB; a checkpoint is 64 KiB) once a save after step 6 has
  // been reported durable; the next save fails. In async mode that save is the first whose
  // write starts after the limit, raised by a later run().
  for (const bool async : {false, true}) {
    INFO("async " << async);
    TempDir dir;
    std::vector<std::string> args = {helper_path(), "--checkpoint-dir", dir.str(), "--steps", "100",
                                     "--save-steps", "4", "--extra", "8192",
                                     "--fsize-limit", "16384", "--fsize-limit-at-step", "6"};
    if (async) args.push_back("--async");
    Child child(args);
    child.read_all();
    const int status = child.wait();
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    std::int64_t last_saved = -1;
    for (const std::string& line : child.lines())
      if (line.rfind("saved ", 0) == 0) last_saved = number_after(line, "saved ");
    CHECK(last_saved >= 4);
    const std::string failed = "model.ckpt-" + std::to_string(last_saved + 4);
    const std::string expected = "error: runhooks: saving checkpoint '" + (dir / failed).string() +
                                 "' failed: runhooks: writing '" + (dir / ("." + failed)).string() +
                                 ".tmp-";
    CHECK_MESSAGE(child.output().find(expected) != std::string::npos, child.output());
    CHECK(child.output().find(".arrays': File too large") != std::string::npos);
    // The state file and the checkpoint it names are intact; no staging file is left.
    demo::LogisticRegression replay = fresh_backend(8192);
    CHECK(check_latest(dir.path, 8192, replay) == last_saved);
    std::vector<std::string> expected_files{"checkpoint"};
    for (const std::string& name : ckpt::named_checkpoints(dir.path))
      expected_files.push_back(name + ".arrays");
    std::sort(expected_files.begin(), expected_files.end());
    CHECK(ckpt::files_in_but_events(dir.path) == expected_files);
  }
}

TEST_CASE("two writers on one directory: the second fails at once, naming the first's pid") {
  TempDir dir;
  Child first({helper_path(), "--checkpoint-dir", dir.str(), "--steps", "1000000000", "--save-steps",
               "1000", "--step-us", "300"});
  while (first.lines().empty()) first.read_for(10);  // its session, and so its lock, exists
  Child second({helper_path(), "--checkpoint-dir", dir.str(), "--steps", "10"});
  second.read_all();
  const int status = second.wait();
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK_MESSAGE(second.output().find("error: runhooks: the checkpoint directory '" + dir.str() +
                                     "' already has a writer (process " +
                                     std::to_string(first.pid()) + " holds") != std::string::npos,
                second.output());
  CHECK(second.output().find("one writer at a time") != std::string::npos);
  CHECK(second.output().find("resumed") == std::string::npos);
  // The first writer goes on, and its end is clean.
  first.kill(SIGTERM);
  first.read_all();
  CHECK(WEXITSTATUS(first.wait()) == 0);
  CHECK(first.lines().back() == "signal SIGTERM");
  // Its lock went with it: a third writer resumes.
  Child third({helper_path(), "--checkpoint-dir", dir.str(), "--steps", "1"});
  third.read_all();
  CHECK(WEXITSTATUS(third.wait()) == 0);
}
