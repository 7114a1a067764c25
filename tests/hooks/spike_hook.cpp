// SpikeHook and SpikeDetector: the raise action, the warmup NaN that Lightning would keep,
// NanTensorHook's inf_too on a NaN-or-inf loss, and validation; the rollback action (to the
// latest checkpoint, at most max_rollbacks times, counted across the rollbacks themselves; no
// checkpoint, a session that does not recover) and the state a checkpoint carries. Lightning's own
// decisions are replayed in tests/hooks/keras_lightning_reference.cpp; the state across SIGKILL
// and resume in tests/checkpoint/checkpoint_hook_states.cpp.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/distributed/stop_vote_hook.hpp>
#include <runhooks/hook_state.hpp>
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/hooks/spike_hook.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/checkpoint_backends.hpp"
#include "support/fakes.hpp"

namespace {
struct Loss : runhooks::Key<double> {
  static constexpr std::string_view name = "loss";
};
struct LossBackend {
  std::vector<double> values;
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(Loss) const { return values.at(static_cast<std::size_t>(step - 1)); }
};
constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();

// The loss of step s is losses[s - 1]; the step and the runs made since the backend was created
// are checkpointed (so a restore shows where it went back to).
struct CheckpointedLossBackend {
  std::vector<double> losses;
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  double fetch(Loss) const { return losses.at(static_cast<std::size_t>(step - 1)); }
  void save(const std::filesystem::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", step);
    out.close();
  }
  void restore(const std::filesystem::path& prefix) {
    step = runhooks::FlatArrayReader(prefix.string() + ".arrays").scalar<std::int64_t>("global_step");
  }
};
}  // namespace

TEST_CASE("SpikeHook: Lightning's action raises TrainingSpikeError, naming the step, after the log line") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{1.0, 1.0, 1.0, 3.5}}, runhooks::SpikeHook<Loss>()};
  session.run();
  session.run();
  session.run();
  CHECK_THROWS_WITH_AS(session.run(), "Training spike detected at global step 4",
                       runhooks::TrainingSpikeError);
  CHECK(capture.lines() == std::vector<std::string>{
                               "SpikeHook: loss spike at global step 4: loss = 3.5, running mean "
                               "1 (rtol 2); steps 3 and 4 recorded as bad."});
}

TEST_CASE("SpikeDetector: a NaN in the warmup is not kept (Lightning would average it in)") {
  runhooks::SpikeDetector detector({.warmup = 2});
  CHECK_FALSE(detector.observe(1.0, 0));
  CHECK_FALSE(detector.observe(nan_value, 1));
  CHECK(detector.mean() == 1.0);
  CHECK(detector.observe(3.0, 2));  // Lightning: mean NaN, no spike for the next 10 values
}

TEST_CASE("NanTensorHook inf_too: +inf and -inf fail like NaN, with the value in the line") {
  fakes::LogCapture capture;
  runhooks::MonitoredSession session{LossBackend{{1.0, -inf_value}},
                                     runhooks::NanTensorHook<Loss>({.inf_too = true})};
  session.run();
  CHECK_THROWS_AS(session.run(), runhooks::NanLossDuringTrainingError);
  CHECK(capture.lines() == std::vector<std::string>{"Model diverged with loss = -inf."});
}

TEST_CASE("SpikeOptions are validated") {
  using O = runhooks::SpikeOptions;
  CHECK_THROWS_WITH_AS((O{.window = 0}.validate()),
                       "runhooks: SpikeOptions::window must be at least 1, got 0.", std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.warmup = -1}.validate()),
                       "runhooks: SpikeOptions::warmup must be at least 0, got -1.", std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.atol = nan_value}.validate()),
                       "runhooks: SpikeOptions::atol must be finite, got nan.", std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.rtol = inf_value}.validate()),
                       "runhooks: SpikeOptions::rtol must be finite, got inf.", std::invalid_argument);
  CHECK_THROWS_AS(runhooks::SpikeHook<Loss>({.window = -3}), std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.max_rollbacks = 0}.validate()),
                       "runhooks: SpikeOptions::max_rollbacks must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.after_rollbacks = runhooks::SpikeAction::rollback}.validate()),
                       "runhooks: SpikeOptions::after_rollbacks must be raise or stop, got rollback.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.on_spike = static_cast<runhooks::SpikeAction>(7)}.validate()),
                       "runhooks: SpikeOptions::on_spike must be raise, stop or rollback, got 7.",
                       std::invalid_argument);
}

TEST_CASE("SpikeHook rollback: back to the latest checkpoint, max_rollbacks times, then after_rollbacks") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  // Steps 1-5 at 1, a spike at step 6 whatever the weights (the same data replayed): two
  // rollbacks to the checkpoint of step 4, then the stop.
  const std::vector<double> losses{1.0, 1.0, 1.0, 1.0, 1.0, 9.0, 1.0};
  runhooks::SpikeHook<Loss> spike({.on_spike = runhooks::SpikeAction::rollback, .max_rollbacks = 2,
                                   .after_rollbacks = runhooks::SpikeAction::stop});
  runhooks::CheckpointSaverHook saver({.checkpoint_dir = dir.str(), .save_steps = 4});
  runhooks::MonitoredSession session(
      runhooks::ChiefSessionCreator([&] { return CheckpointedLossBackend{losses}; },
                                    {.checkpoint_dir = dir.str()}),
      std::ref(spike), std::ref(saver));
  std::vector<std::int64_t> steps;
  while (!session.should_stop()) {
    session.run();
    steps.push_back(session.raw_session().step);
  }
  // Each rollback replays the run() that threw on the restored backend (step 5).
  CHECK(steps == std::vector<std::int64_t>{1, 2, 3, 4, 5, 5, 5, 6});
  CHECK(spike.rollbacks() == 2);
  CHECK(spike.bad_steps() == std::vector<std::int64_t>{5, 6, 5, 6, 5, 6});
  // The hook's state came back with the checkpoint of step 4: 4 checks before step 5 and 6.
  CHECK(spike.state().checks == 6);
  const std::string line = "SpikeHook: loss spike at global step 6: loss = 9, running mean 1 (rtol "
                           "2); steps 5 and 6 recorded as bad.";
  CHECK(capture.contains(line + " Rolling back to the latest checkpoint (rollback 1 of 2)."));
  CHECK(capture.contains("runhooks: rolling back to the latest checkpoint: SpikeHook: loss spike "
                         "at global step 6 (rollback 1 of 2)"));
  CHECK(capture.contains(line + " Rolling back to the latest checkpoint (rollback 2 of 2)."));
  CHECK(capture.contains(line + " No rollback left (max_rollbacks 2): stopping."));
  CHECK_FALSE(capture.contains("backend lost"));  // a rollback, not a preemption
}

TEST_CASE("SpikeHook rollback: no checkpoint yet, or a session that cannot go back, is an error") {
  fakes::LogCapture capture;
  const ckpt::TempDir dir;
  const std::vector<double> losses{1.0, 1.0, 9.0};
  const runhooks::SpikeOptions rollback{.on_spike = runhooks::SpikeAction::rollback};
  {
    // A checkpoint directory without a checkpoint: the session stops without a backend.
    runhooks::MonitoredSession session(
        runhooks::ChiefSessionCreator([&] { return CheckpointedLossBackend{losses}; },
                                      {.checkpoint_dir = dir.str()}),
        runhooks::SpikeHook<Loss>(rollback));
    session.run();
    session.run();
    CHECK_THROWS_WITH_AS(session.run(),
                         doctest::Contains("a rollback found no checkpoint to go back to"),
                         runhooks::RollbackError);
    CHECK(session.should_stop());
  }
  {
    // A creator that restores nothing.
    runhooks::MonitoredSession session(
        runhooks::SessionCreator([&] { return CheckpointedLossBackend{losses}; }),
        runhooks::SpikeHook<Loss>(rollback));
    session.run();
    session.run();
    CHECK_THROWS_WITH_AS(session.run(),
                         doctest::Contains("a rollback needs a session creator that restores "
                                           "checkpoints"),
                         runhooks::RollbackError);
  }
  {
    // A session that does not recover raises the request itself (an AbortedError).
    runhooks::SingularMonitoredSession session(CheckpointedLossBackend{losses},
                                               runhooks::SpikeHook<Loss>(rollback));
    session.run();
    session.run();
    CHECK_THROWS_WITH_AS(session.run(), "SpikeHook: loss spike at global step 3 (rollback 1 of 3)",
                         runhooks::RollbackRequest);
  }
}

TEST_CASE("SpikeHook in Voted: a rollback would be one rank's, refused when made; stop is voted") {
  CHECK_THROWS_WITH_AS(runhooks::Voted(runhooks::SpikeHook<Loss>({.on_spike = runhooks::SpikeAction::rollback})),
                       doctest::Contains("SpikeOptions::on_spike = rollback would roll back one "
                                         "rank alone"),
                       std::invalid_argument);
  fakes::LogCapture capture;
  runhooks::detail::stop_ballot.store(false);
  runhooks::MonitoredSession session{
      LossBackend{{1.0, 1.0, 5.0, 1.0}},
      runhooks::Voted(runhooks::SpikeHook<Loss>({.on_spike = runhooks::SpikeAction::stop}))};
  session.run();
  session.run();
  session.run();  // the spike: a vote cast, no stop of this rank alone
  CHECK(runhooks::detail::stop_ballot.load());
  CHECK_FALSE(session.should_stop());
  static_assert(runhooks::StatefulHook<std::remove_cvref_t<decltype(session.hook<0>())>>);
  CHECK(session.hook<0>().state().checks == 3);
  runhooks::detail::stop_ballot.store(false);
}

TEST_CASE("SpikeHook state: the running mean and the checks round-trip; rollbacks never go down") {
  runhooks::SpikeHook<Loss> hook({.window = 3});
  runhooks::MonitoredSession session{LossBackend{{1.0, 2.0, 3.0, 4.0, 5.0}}, std::ref(hook)};
  for (int i = 0; i < 5; ++i) session.run();
  const runhooks::SpikeState saved = hook.state();
  CHECK(saved.checks == 5);
  CHECK(saved.kept == 5);
  CHECK(saved.last == 5.0);
  CHECK(saved.window == std::vector<double>{4.0, 5.0, 3.0});  // the ring as it is
  CHECK(runhooks::detail::encode_hook_states(hook) ==
        "runhooks-hook-states 1\nSpikeHook<loss> 5 5 5 5 [4,5,3] 0\nend\n");

  runhooks::SpikeHook<Loss> other({.window = 3});
  runhooks::detail::decode_hook_states(runhooks::detail::encode_hook_states(hook), other);
  CHECK(other.detector().mean() == 4.0);
  CHECK(other.detector().last() == 5.0);
  CHECK(other.state().checks == 5);
  other.restore({.checks = 5, .kept = 5, .last = 5.0, .window = {4.0, 5.0, 3.0}, .rollbacks = 2});
  other.restore({.checks = 1, .kept = 1, .last = 1.0, .window = {1.0}, .rollbacks = 1});
  CHECK(other.rollbacks() == 2);
  CHECK(other.detector().mean() == 1.0);

  // States this hook could not have written.
  CHECK_THROWS_WITH_AS(other.restore({.checks = 5, .kept = 5, .last = 5.0, .window = {1.0, 2.0},
                                      .rollbacks = 0}),
                       doctest::Contains("does not fit a window of 3"), std::invalid_argument);
  CHECK_THROWS_AS(other.restore({.checks = 2, .kept = 3, .last = 1.0, .window = {1.0, 1.0, 1.0},
                                 .rollbacks = 0}),
                  std::invalid_argument);
  CHECK_THROWS_AS(other.restore({.checks = 1, .kept = 1, .last = 1.0, .window = {nan_value},
                                 .rollbacks = 0}),
                  std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::detail::decode_hook_states(
                           "runhooks-hook-states 1\nSpikeHook<loss> 5 1 1 1 [1,,2] 0\nend\n", other),
                       "the state of hook 'SpikeHook<loss>' has value 4 '[1,,2]', which is not a "
                       "valid list of numbers ([1,2.5], or [] for none)",
                       std::invalid_argument);
  CHECK_THROWS_AS(runhooks::detail::decode_hook_states(
                      "runhooks-hook-states 1\nSpikeHook<loss> 5 1 1 1 1 0\nend\n", other),
                  std::invalid_argument);
}
