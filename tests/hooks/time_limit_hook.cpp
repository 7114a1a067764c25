// TimeLimitHook: the budget checked at creation and on a sampled clock, the save margin, the
// elapsed time carried by end() and by state()/restore(), parse_duration, and validation; in
// Voted (many processes, without an engine here): a spent budget at creation casts the vote, and
// the wrappers keep the state. With real ranks: tests/mpi/stop_vote.cpp.
// Lightning's Timer sequences are replayed in tests/hooks/keras_lightning_reference.cpp.
#include <runhooks/distributed/chief_only.hpp>
#include <runhooks/distributed/stop_vote_hook.hpp>
#include <runhooks/hooks/time_limit_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/fakes.hpp"

namespace {
// Each run takes step_secs of the manual clock.
struct TimedBackend {
  runhooks::ManualClock clock;
  double step_secs = 0.001;
  std::int64_t step = 0;
  void run() {
    ++step;
    clock.advance(step_secs);
  }
  std::int64_t global_step() const { return step; }
};
}  // namespace

TEST_CASE("TimeLimitHook: a spent restored budget stops a recoverable session before its first step") {
  fakes::LogCapture capture;
  runhooks::ManualClock clock(100.0);
  runhooks::TimeLimitHook<runhooks::ManualClock> hook({.max_secs = 60.0}, clock);
  hook.restore({61.0});
  runhooks::MonitoredSession session{TimedBackend{clock}, std::ref(hook)};
  CHECK(session.should_stop());
  CHECK(session.raw_session().step == 0);
  CHECK(capture.lines() == std::vector<std::string>{
                               "TimeLimitHook: Time limit reached. Elapsed time is 0:01:01. "
                               "Stopping before the first step (limit 60 s, save margin 0 s)."});
}

TEST_CASE("TimeLimitHook: the save margin stops earlier; the sampled clock is read about once per resolution") {
  fakes::LogCapture capture;
  runhooks::ManualClock clock;
  runhooks::TimeLimitHook<runhooks::ManualClock> hook(
      {.max_secs = 100.0, .save_margin_secs = 10.0, .resolution_secs = 1.0}, clock);
  runhooks::MonitoredSession session{TimedBackend{clock}, std::ref(hook)};
  while (!session.should_stop()) session.run();
  // 1 ms steps: the stop comes at 90 s of training, at most about one resolution late.
  CHECK(hook.elapsed() >= 90.0);
  CHECK(hook.elapsed() < 91.5);
  CHECK(session.raw_session().step >= 90000);
  // About 90 reads (one a second) and the first ones while the rate is unknown, not 90,000.
  CHECK(hook.clock_reads() < 150);
  CHECK(capture.contains("Elapsed time is 0:01:30. Stopping at global step"));
  CHECK(hook.remaining() <= 10.0);
}

TEST_CASE("TimeLimitHook: end() and state()/restore() carry the elapsed time into the next session") {
  fakes::LogCapture capture;
  runhooks::ManualClock clock;
  runhooks::TimeLimitHook<runhooks::ManualClock> hook({.max_secs = 10.0, .resolution_secs = 1e-9},
                                                      clock);
  {
    runhooks::MonitoredSession session{TimedBackend{clock, 1.0}, std::ref(hook)};
    for (int i = 0; i < 4; ++i) session.run();
  }
  CHECK(hook.elapsed() == 4.0);
  CHECK(hook.state().elapsed_secs == 4.0);
  clock.advance(1000.0);  // time between sessions does not count
  runhooks::MonitoredSession again{TimedBackend{clock, 1.0}, std::ref(hook)};
  int runs = 0;
  while (!again.should_stop()) {
    again.run();
    ++runs;
  }
  CHECK(runs == 6);
  // A fresh hook given the saved state goes on where the first left off.
  runhooks::TimeLimitHook<runhooks::ManualClock> resumed({.max_secs = 10.0, .resolution_secs = 1e-9},
                                                         clock);
  resumed.restore({7.5});
  runhooks::MonitoredSession third{TimedBackend{clock, 1.0}, std::ref(resumed)};
  runs = 0;
  while (!third.should_stop()) {
    third.run();
    ++runs;
  }
  CHECK(runs == 3);
  CHECK_THROWS_WITH_AS(resumed.restore({-1.0}),
                       "runhooks: TimeLimitHook::restore: the saved elapsed time must be a number of "
                       "seconds at least 0, got -1.",
                       std::invalid_argument);
}

TEST_CASE("TimeLimitHook: options and durations are validated") {
  using O = runhooks::TimeLimitOptions;
  CHECK_THROWS_WITH_AS((O{}.validate()),
                       "runhooks: TimeLimitOptions::max_secs must be a number of seconds greater than "
                       "0 and at most 1e+09, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.max_secs = 10.0, .save_margin_secs = 10.0}.validate()),
                       "runhooks: TimeLimitOptions::save_margin_secs must be below max_secs (10), got 10.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.max_secs = 10.0, .save_margin_secs = -1.0}.validate()),
                       doctest::Contains("save_margin_secs"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.max_secs = 10.0, .resolution_secs = 0.0}.validate()),
                       doctest::Contains("resolution_secs"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.max_secs = std::numeric_limits<double>::infinity()}.validate()),
                       doctest::Contains("max_secs"), std::invalid_argument);
  CHECK_THROWS_AS(runhooks::TimeLimitHook({.max_secs = -1.0}), std::invalid_argument);
  CHECK(runhooks::parse_duration("02:00:00:00") == 172800.0);
  CHECK(runhooks::TimeLimitHook({.max_secs = runhooks::parse_duration("00:12:00:00")}).options().max_secs ==
        43200.0);
}

namespace {
// No global step: the hook counts its own runs between clock reads.
struct StepLessBackend {
  runhooks::ManualClock clock;
  void run() { clock.advance(0.5); }
};
}  // namespace

TEST_CASE("TimeLimitHook: on a backend without a global step it counts its own runs") {
  fakes::LogCapture capture;
  runhooks::ManualClock clock;
  runhooks::TimeLimitHook<runhooks::ManualClock> hook({.max_secs = 3.0, .resolution_secs = 1e-9},
                                                      clock);
  runhooks::MonitoredSession session{StepLessBackend{clock}, std::ref(hook)};
  int runs = 0;
  while (!session.should_stop()) {
    session.run();
    ++runs;
  }
  CHECK(runs == 6);
  CHECK(capture.contains("Elapsed time is 0:00:03. Stopping after this run"));
}

TEST_CASE("TimeLimitHook in Voted: a budget spent at creation casts this rank's vote, and the state stays reachable") {
  fakes::LogCapture capture;
  runhooks::detail::stop_ballot.store(false);
  runhooks::ManualClock clock(100.0);
  runhooks::TimeLimitHook<runhooks::ManualClock> hook({.max_secs = 60.0}, clock);
  hook.restore({61.0});
  {
    // ChiefOnly(Voted(...)) on the chief: the vote, not a stop of this rank alone.
    runhooks::MonitoredSession session{TimedBackend{clock},
                                       runhooks::ChiefOnly(runhooks::Voted(std::ref(hook)), true)};
    CHECK_FALSE(session.should_stop());
    CHECK(runhooks::detail::stop_ballot.load());
    CHECK(hook.stopped());
    CHECK(capture.lines() == std::vector<std::string>{
                                 "TimeLimitHook: Time limit reached. Elapsed time is 0:01:01. "
                                 "Stopping every rank after the first vote (limit 60 s, save "
                                 "margin 0 s)."});
    using Wrapped = std::remove_cvref_t<decltype(session.hook<0>())>;
    static_assert(runhooks::StatefulHook<Wrapped>);
    CHECK(Wrapped::state_name() == "TimeLimitHook");
    CHECK(session.hook<0>().state().elapsed_secs == 61.0);
  }
  runhooks::detail::stop_ballot.store(false);
}
