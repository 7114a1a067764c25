// Hook state in the checkpoint (issue 27, item 9): EarlyStoppingHook, ReduceLROnPlateauHook,
// TimeLimitHook and SpikeHook states committed with the backend's files in <checkpoint>.hooks and
// restored on start and on recovery; a run killed by SIGKILL and resumed decides as a straight run
// (a spike's rollback included) and ends with the same files byte for byte; a hook-state file that
// does not fit the session is a CheckpointError naming the file and the hook; a session whose
// creation fails leaves no hook-state access behind in the saver.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/hook_state.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/hooks/spike_hook.hpp>
#include <runhooks/hooks/time_limit_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/checkpoint_backends.hpp"

namespace {

namespace fs = std::filesystem;

struct ValLoss : runhooks::Key<double> {
  static constexpr std::string_view name = "val_loss";
};

// The loss after step s: falls, then hovers (the plateau reduces, early stopping counts).
double loss_at(std::int64_t s) {
  if (s <= 8) return 1.0 / static_cast<double>(s);
  return 0.125 + 0.001 * static_cast<double>(s % 3);
}

// The step whose run() loses the backend (an AbortedError), once; -1: none.
std::int64_t lose_backend_at = -1;

struct TrainLoss : runhooks::Key<double> {
  static constexpr std::string_view name = "loss";
};
// The step whose training loss spikes, once per process (after the rollback, its replay does
// not); -1: none.
std::int64_t spike_at = -1;

// A global step, a variable trained with the backend's learning rate, all three checkpointed.
struct RateBackend {
  std::int64_t step = 0;
  double var = 1.0;
  double rate = 0.5;
  void run() {
    if (step + 1 == lose_backend_at) {
      lose_backend_at = -1;
      throw runhooks::AbortedError("backend lost at step " + std::to_string(step + 1));
    }
    ++step;
    var -= rate * (var - loss_at(step));
  }
  std::int64_t global_step() const { return step; }
  double fetch(ValLoss) const { return loss_at(step); }
  double fetch(TrainLoss) const {
    if (step != spike_at) return 1.0;
    spike_at = -1;
    return 50.0;
  }
  double learning_rate() const { return rate; }
  void set_learning_rate(double r) { rate = r; }
  void save(const fs::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", step);
    out.add("var", var);
    out.add("rate", rate);
    out.close();
  }
  void restore(const fs::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    step = in.scalar<std::int64_t>("global_step");
    var = in.scalar<double>("var");
    rate = in.scalar<double>("rate");
  }
};

// RateBackend saved in the background: the saver reads the hooks' states on the session's thread
// when it takes the snapshot, and its thread writes them beside the snapshot.
struct AsyncRateBackend : RateBackend {
  struct Snapshot {
    RateBackend copy;
    void write(const fs::path& prefix) const { copy.save(prefix); }
  };
  Snapshot snapshot() const { return {*this}; }
};
static_assert(runhooks::Snapshottable<AsyncRateBackend>);

// One second of the manual clock per step.
struct Tick {
  runhooks::ManualClock clock;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    clock.advance(1.0);
  }
};

// SIGKILLs its own process after step `at` (after every hook before it, the saver included).
struct KillAt {
  std::int64_t at;
  template <class Ctx, class Values>
  void after_run(Ctx& ctx, const Values&) {
    if (ctx.session().global_step() == at) ::raise(SIGKILL);
  }
};

using EarlyStopping = runhooks::EarlyStoppingHook<ValLoss>;
using Plateau = runhooks::ReduceLROnPlateauHook<ValLoss>;
using TimeLimit = runhooks::TimeLimitHook<runhooks::ManualClock>;
using Spike = runhooks::SpikeHook<TrainLoss>;

struct Hooks {
  runhooks::ManualClock clock;
  Tick tick{clock};
  EarlyStopping early{{.min_delta = 0.01, .patience = 12}};
  Plateau plateau{{.factor = 0.5, .patience = 3}};
  TimeLimit timer{{.max_secs = 1000.0, .resolution_secs = 1e-9}, clock};
  Spike spike{{.on_spike = runhooks::SpikeAction::rollback, .max_rollbacks = 2}};
};

struct Outcome {
  std::int64_t last_step = 0;
  double rate = 0.0;
  std::optional<std::int64_t> stopped_step;
  runhooks::EarlyStoppingReason reason{};
  std::int64_t wait = 0, plateau_wait = 0, plateau_cooldown = 0;
  double elapsed = 0.0;
  std::int64_t rollbacks = 0;
};

// Runs up to `steps` steps (early stopping may end it sooner) with every stateful hook and a saver
// every 5 steps, resuming from `dir`; kill_at > 0 SIGKILLs the process after that step. With
// `spike`, a SpikeHook too, and the loss of step 13 spikes once: a rollback to step 10.
template <class Backend = RateBackend>
Outcome train(const fs::path& dir, std::int64_t steps, std::int64_t kill_at = -1,
              bool spike = false) {
  Hooks h;
  runhooks::CheckpointSaverHook saver({.checkpoint_dir = dir.c_str(), .save_steps = 5});
  runhooks::ChiefSessionCreator creator([] { return Backend{}; },
                                        {.checkpoint_dir = dir.c_str()});
  Outcome out;
  auto run = [&](auto& session) {
    while (!session.should_stop() && session.raw_session().step < steps) session.run();
    out.last_step = session.raw_session().step;
    out.rate = session.raw_session().rate;
    session.close();
  };
  if (spike) {
    spike_at = 13;
    runhooks::MonitoredSession session(creator, std::ref(h.tick), std::ref(h.early),
                                       std::ref(h.plateau), std::ref(h.timer), std::ref(h.spike),
                                       std::ref(saver), KillAt{kill_at});
    run(session);
  } else {
    runhooks::MonitoredSession session(creator, std::ref(h.tick), std::ref(h.early),
                                       std::ref(h.plateau), std::ref(h.timer), std::ref(saver),
                                       KillAt{kill_at});
    run(session);
  }
  out.rollbacks = h.spike.rollbacks();
  out.stopped_step = h.early.stopped_step();
  out.reason = h.early.stop_reason();
  out.wait = h.early.wait();
  out.plateau_wait = h.plateau.wait();
  out.plateau_cooldown = h.plateau.cooldown_counter();
  out.elapsed = h.timer.elapsed();
  return out;
}

fs::path latest(const fs::path& dir) { return *runhooks::latest_checkpoint(dir); }

}  // namespace

TEST_CASE("hook states: k steps, SIGKILL, resume and N - k steps decide as N steps straight") {
  fakes::LogCapture capture;
  ckpt::TempDir straight_dir, resumed_dir;
  const Outcome straight = train(straight_dir.path, 60, -1, true);
  // The straight run: reductions on both sides of the kill, and early stopping after it.
  REQUIRE(straight.stopped_step.has_value());
  CHECK(*straight.stopped_step == 20);
  CHECK(straight.last_step == *straight.stopped_step);
  CHECK(straight.rate < 0.5 / 4);
  CHECK(straight.rollbacks == 1);  // the spike at step 13 went back to step 10
  CHECK(capture.contains("runhooks: rolling back to the latest checkpoint: SpikeHook: loss spike "
                         "at global step 13 (rollback 1 of 2)"));

  // The same run killed by a real SIGKILL after step 18: the checkpoint of step 15 survives.
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    train(resumed_dir.path, 60, 18, true);
    ::_exit(3);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  REQUIRE(ckpt::step_in(latest(resumed_dir.path)) == 15);
  CHECK(fs::exists(latest(resumed_dir.path).string() + ".hooks"));

  const Outcome resumed = train(resumed_dir.path, 60, -1, true);
  CHECK(resumed.last_step == straight.last_step);
  CHECK(resumed.stopped_step == straight.stopped_step);
  CHECK(resumed.reason == straight.reason);
  CHECK(resumed.rate == straight.rate);
  CHECK(resumed.wait == straight.wait);
  CHECK(resumed.plateau_wait == straight.plateau_wait);
  CHECK(resumed.plateau_cooldown == straight.plateau_cooldown);
  CHECK(resumed.elapsed == straight.elapsed);
  CHECK(resumed.rollbacks == 1);  // restored with step 15's state, not counted again
  // The final checkpoints, backend and hooks, byte for byte.
  const fs::path a = latest(straight_dir.path), b = latest(resumed_dir.path);
  CHECK(a.filename() == b.filename());
  CHECK(ckpt::read_text(a.string() + ".arrays") == ckpt::read_text(b.string() + ".arrays"));
  CHECK(ckpt::read_text(a.string() + ".hooks") == ckpt::read_text(b.string() + ".hooks"));

  // A backend lost at step 17 in the same run: the recovery restores the checkpoint of step 15
  // with the hooks' states of step 15 (not those of step 16), and the run decides as the
  // straight one.
  ckpt::TempDir recovered_dir;
  lose_backend_at = 17;
  const Outcome recovered = train(recovered_dir.path, 60, -1, true);
  CHECK(lose_backend_at == -1);
  CHECK(recovered.stopped_step == straight.stopped_step);
  CHECK(recovered.rate == straight.rate);
  CHECK(recovered.wait == straight.wait);
  CHECK(recovered.plateau_wait == straight.plateau_wait);
  CHECK(recovered.elapsed == straight.elapsed);
  CHECK(recovered.rollbacks == 1);
  const fs::path c = latest(recovered_dir.path);
  CHECK(ckpt::read_text(a.string() + ".arrays") == ckpt::read_text(c.string() + ".arrays"));
  CHECK(ckpt::read_text(a.string() + ".hooks") == ckpt::read_text(c.string() + ".hooks"));
}

TEST_CASE("hook states: committed as a file of the checkpoint, restored on a session's start") {
  fakes::LogCapture capture;
  ckpt::TempDir dir;
  train(dir.path, 12);  // early stopping: wait counts from step 8's best
  const auto state = runhooks::read_checkpoint_state(dir.path);
  REQUIRE(state.has_value());
  // The .hooks file is one of the checkpoint's files: retention deletes it with the rest.
  const auto suffixes = state->file_suffixes.at(latest(dir.path).filename().string());
  CHECK(suffixes == std::vector<std::string>{".arrays", ".hooks"});
  CHECK(ckpt::read_text(latest(dir.path).string() + ".hooks") ==
        "runhooks-hook-states 1\n"
        "EarlyStoppingHook<val_loss> 4 0.125 8 4 12\n"
        "ReduceLROnPlateauHook<val_loss> 4 0.125 1 0 12\n"
        "TimeLimitHook 1 12\n"
        "end\n");

  // A session created from it: every hook starts where the checkpoint left it.
  Hooks h;
  runhooks::ChiefSessionCreator creator([] { return RateBackend{}; },
                                        {.checkpoint_dir = dir.path.c_str()});
  runhooks::MonitoredSession session(creator, std::ref(h.tick), std::ref(h.early),
                                     std::ref(h.plateau), std::ref(h.timer));
  CHECK(session.raw_session().step == 12);
  CHECK(h.early.wait() == 4);
  CHECK(h.early.best() == 0.125);
  CHECK(h.early.checks() == 12);
  CHECK(h.plateau.checks() == 12);
  CHECK(h.timer.elapsed() == 12.0);
}

TEST_CASE("hook states: a background save writes the states read when its snapshot was taken") {
  fakes::LogCapture capture;
  ckpt::TempDir dir, straight_dir;
  train<AsyncRateBackend>(dir.path, 12);
  train(straight_dir.path, 12);
  for (const char* name : {"model.ckpt-5.hooks", "model.ckpt-10.hooks", "model.ckpt-12.hooks"})
    CHECK(ckpt::read_text(dir / name) == ckpt::read_text(straight_dir / name));
  CHECK(ckpt::read_text(dir / "model.ckpt-10.hooks").find("\nTimeLimitHook 1 10\n") !=
        std::string::npos);
}

TEST_CASE("hook states: a session without stateful hooks writes no .hooks file") {
  fakes::LogCapture capture;
  ckpt::TempDir dir;
  runhooks::CheckpointSaverHook saver({.checkpoint_dir = dir.path.c_str(), .save_steps = 5});
  {
    runhooks::MonitoredSession session(RateBackend{}, std::ref(saver));
    for (int i = 0; i < 5; ++i) session.run();
  }
  for (const std::string& name : ckpt::files_in_but_events(dir.path))
    CHECK(name.find(".hooks") == std::string::npos);
}

namespace {

// Creating a session from `dir` with the three stateful hooks: the CheckpointError's message.
std::string restore_error(const fs::path& dir, bool with_timer = true) {
  Hooks h;
  runhooks::ChiefSessionCreator creator([] { return RateBackend{}; },
                                        {.checkpoint_dir = dir.c_str()});
  try {
    if (with_timer)
      runhooks::MonitoredSession session(creator, std::ref(h.early), std::ref(h.plateau),
                                         std::ref(h.timer));
    else
      runhooks::MonitoredSession session(creator, std::ref(h.early), std::ref(h.plateau));
  } catch (const runhooks::CheckpointError& e) {
    // Nothing was restored into any hook.
    CHECK(h.early.checks() == 0);
    CHECK(h.plateau.checks() == 0);
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("hook states: a file that does not fit the session is an error naming file and hook") {
  fakes::LogCapture capture;
  ckpt::TempDir dir;
  train(dir.path, 12);
  const std::string file = latest(dir.path).string() + ".hooks";
  const std::string good = ckpt::read_text(file);
  const std::string where = "restoring the hook states of checkpoint '" +
                            latest(dir.path).string() + "' failed: the file '" + file + "': ";
  auto with = [&](const std::string& text) {
    fs::remove(file);
    ckpt::put_text(file, text);
    return restore_error(dir.path);
  };
  const std::string header = "runhooks-hook-states 1\n";
  const std::string es = "EarlyStoppingHook<val_loss> 4 0.125 8 4 12\n";
  const std::string rp = "ReduceLROnPlateauHook<val_loss> 4 0.125 0 0 12\n";
  const std::string tl = "TimeLimitHook 1 12\n";

  CHECK(with(good) == "(no error)");
  // A hook the session lacks (the timer, left out of the session).
  CHECK(restore_error(dir.path, false).find(where + "it holds the state of hook 'TimeLimitHook', "
                                            "which this session does not have") !=
        std::string::npos);
  // A hook the file lacks.
  CHECK(with(header + es + tl + "end\n").find(where + "it holds no state for hook "
                                              "'ReduceLROnPlateauHook<val_loss>'") !=
        std::string::npos);
  // Unknown, hostile names.
  CHECK(with(header + es + rp + tl + "Evil\x01Hook 1 3\nend\n")
            .find(where + "it holds the state of hook 'Evil\\x01Hook', which this session does "
                          "not have") != std::string::npos);
  CHECK(with(header + es + es + rp + tl + "end\n")
            .find("'EarlyStoppingHook<val_loss>' twice") != std::string::npos);
  // Truncated: every proper prefix of the good file.
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::string message = with(good.substr(0, n));
    CHECK_MESSAGE(message.find(where) != std::string::npos, n << ": " << message);
  }
  // Another version, values of the wrong count or kind, and a state the hook refuses.
  CHECK(with("runhooks-hook-states 2\n" + es + rp + tl + "end\n")
            .find(where + "its first line is not 'runhooks-hook-states 1'") != std::string::npos);
  CHECK(with(header + "EarlyStoppingHook<val_loss> 3 0.125 8 4\n" + rp + tl + "end\n")
            .find(where + "the state of hook 'EarlyStoppingHook<val_loss>' has 3 values where this "
                          "build's has 4") != std::string::npos);
  CHECK(with(header + es + "ReduceLROnPlateauHook<val_loss> 4 0.125 0x1 0 12\n" + tl + "end\n")
            .find("the state of hook 'ReduceLROnPlateauHook<val_loss>' has value 2 '0x1', which "
                  "is not a valid integer") != std::string::npos);
  CHECK(with(header + es + rp + "TimeLimitHook 1 1e999\nend\n")
            .find("the state of hook 'TimeLimitHook' has value 1 '1e999'") != std::string::npos);
  CHECK(with(header + "EarlyStoppingHook<val_loss> 4 0.125 8 -4 12\n" + rp + tl + "end\n")
            .find(where + "hook 'EarlyStoppingHook<val_loss>' refused its state: ") !=
        std::string::npos);
  CHECK(with(header + es + rp + tl + "end\n" + std::string(1 << 20, 'x'))
            .find("larger than 1048576 bytes") != std::string::npos);
  // A planted link is not followed; a missing file names the first hook without a state.
  fs::remove(file);
  fs::create_symlink(fs::path("/etc/passwd"), file);
  CHECK(restore_error(dir.path).find("the hook-state file '" + file + "' is a symbolic link") !=
        std::string::npos);
  fs::remove(file);
  CHECK(restore_error(dir.path).find("failed: there is no file '" + file + "', so it holds no "
                                     "state for hook 'EarlyStoppingHook<val_loss>'") !=
        std::string::npos);
  // The escape: the backend alone.
  Hooks h;
  runhooks::ChiefSessionCreator creator([] { return RateBackend{}; },
                                        {.checkpoint_dir = dir.path.c_str(), .ignore_hook_states = true});
  runhooks::MonitoredSession session(creator, std::ref(h.early));
  CHECK(session.raw_session().step == 12);
  CHECK(h.early.checks() == 0);
}

namespace {
struct ThrowInBegin {
  void begin() { throw std::runtime_error("begin failed"); }
};
}  // namespace

TEST_CASE("hook states: a session whose creation fails leaves the saver without its hooks' states") {
  fakes::LogCapture capture;
  ckpt::TempDir dir;
  runhooks::CheckpointSaverHook saver({.checkpoint_dir = dir.path.c_str(), .save_steps = 5});
  {
    Hooks h;
    auto failing = [&]() -> RateBackend { throw std::runtime_error("no backend"); };
    CHECK_THROWS_WITH(runhooks::MonitoredSession(runhooks::SessionCreator(failing),
                                                 std::ref(h.early), std::ref(saver)),
                      "no backend");
    // A begin() that throws: the saver is given the states only after every begin().
    CHECK_THROWS_WITH(runhooks::MonitoredSession(RateBackend{}, std::ref(h.early), std::ref(saver),
                                                 ThrowInBegin{}),
                      "begin failed");
  }  // the hooks, and the session's storage, are gone
  // The saver, reused by a session without stateful hooks (which attaches nothing), writes no
  // states: it does not read the failed session's.
  {
    runhooks::MonitoredSession session(RateBackend{}, std::ref(saver));
    for (int i = 0; i < 5; ++i) session.run();
  }
  CHECK(fs::exists(dir / "model.ckpt-5.arrays"));
  for (const std::string& name : ckpt::files_in_but_events(dir.path))
    CHECK(name.find(".hooks") == std::string::npos);
}
