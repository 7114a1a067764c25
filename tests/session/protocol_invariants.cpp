// The hook protocol's invariants (section 3 K of tf-semantics.md, derived from TensorFlow's code
// and section 1.1), checked on MonitoredSession itself.
//
// Not ported here:
//   K5 (where feed conflicts stop the before_run calls): a feed conflict is a compile error in
//       runhooks, so no before_run runs at all; tests/compile_fail/ covers the conflicts.
//   K7 (GlobalStepWaiterHook blocks only the first run): a property of that hook, not of the
//       core; it belongs with the GlobalStepWaiterHook tests.
#include <doctest/doctest.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <runhooks/hooks/stop_at_step_hook.hpp>

#include <support/fakes.hpp>

using namespace fakes;
using Log = std::vector<std::string>;

namespace {

// Requests a stop in before_run (K4: it does not cancel the current run).
struct StopInBeforeRun {
  template <class Ctx>
  void before_run(Ctx& run_context) {
    run_context.request_stop();
  }
};

// Requests a stop in after_run, then raises.
struct RaiseInAfterRun {
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    run_context.request_stop();
    throw std::runtime_error("after_run failed");
  }
};

FakeHook<> named(const char* name, CallLog& log) {
  FakeHook<> hook;
  hook.name = name;
  hook.log = &log;
  return hook;
}

}  // namespace

TEST_CASE("K1 every phase calls hooks [A, B] in list order, teardown included") {
  CallLog log;
  FakeHook<> a = named("A", log);
  FakeHook<> b = named("B", log);
  auto creator = [&] {
    log.add("create");
    FakeBackend backend;
    backend.log = &log;
    return backend;
  };
  runhooks::MonitoredSession session{creator, std::ref(a), std::ref(b)};
  CHECK(log.entries == Log{"A.begin", "B.begin", "create", "A.after_create_session",
                           "B.after_create_session"});
  log.entries.clear();
  session.run();
  CHECK(log.entries == Log{"A.before_run", "B.before_run", "backend.run", "A.after_run", "B.after_run"});
  log.entries.clear();
  session.close();
  CHECK(log.entries == Log{"A.end", "B.end"});
}

TEST_CASE("K1 the order holds on recovery: after_create_session A, B again, no begin, then the replay") {
  CallLog log;
  FakeHook<> a = named("A", log);
  FakeHook<> b = named("B", log);
  int created = 0;
  auto creator = [&] {
    log.add("create");
    FakeBackend backend;
    backend.log = &log;
    if (++created == 1) backend.throw_at(1, runhooks::AbortedError("lost"));
    return backend;
  };
  runhooks::MonitoredSession session{creator, std::ref(a), std::ref(b)};
  log.entries.clear();
  session.run();
  CHECK(log.entries == Log{"A.before_run", "B.before_run", "backend.run",  // raises
                           "create", "A.after_create_session", "B.after_create_session",
                           "A.before_run", "B.before_run", "backend.run", "A.after_run",
                           "B.after_run"});
}

TEST_CASE("K2 after_create_session count = 1 + re-creations while begin stays 1") {
  int created = 0;
  auto creator = [&] {
    FakeBackend backend;
    if (++created <= 2) backend.throw_at(2, runhooks::UnavailableError("lost"));
    return backend;
  };
  FakeHook<> hook;
  runhooks::MonitoredSession session{creator, std::ref(hook)};
  CHECK(hook.call_counter.begin == 1);
  CHECK(hook.call_counter.after_create_session == 1);
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 1);  // re-created once
  CHECK(hook.call_counter.after_create_session == 2);
  CHECK(do_step(session) == 1);  // re-created twice
  CHECK(hook.call_counter.after_create_session == 3);
  CHECK(hook.call_counter.begin == 1);
  CHECK(hook.last_coord == &session.coordinator());  // a new coordinator each time
}

TEST_CASE("K3 OutOfRangeError from before_run in the loop: after_run count unchanged, end +1") {
  RaiseOnceAtCountN raiser(2, runhooks::OutOfRangeError("EOI"));
  FakeHook<> hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(raiser), std::ref(hook)};
  runhooks::run_loop(session);
  CHECK(hook.call_counter.after_run == 1);
  CHECK(hook.call_counter.end == 1);
}

TEST_CASE("K3 RuntimeError from before_run in the loop: end count unchanged") {
  RaiseOnceAtCountN raiser(2, std::runtime_error("regular exception"));
  FakeHook<> hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(raiser), std::ref(hook)};
  CHECK_THROWS_AS(runhooks::run_loop(session), std::runtime_error);
  CHECK(hook.call_counter.after_run == 1);
  CHECK(hook.call_counter.end == 0);
}

TEST_CASE("K4 A's request_stop in after_run: B's after_run still runs and sees it; the next run calls no before_run") {
  FakeHook<> a;
  FakeHook<> b;
  a.should_stop = true;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(a), std::ref(b)};
  session.run();
  CHECK(b.call_counter.after_run == 1);
  CHECK(b.stop_requested_in_after_run);
  CHECK(session.should_stop());
  CHECK_THROWS_WITH_AS(session.run(), "Run called even after should_stop requested.",
                       runhooks::UsageError);
  CHECK(a.call_counter.before_run == 1);
  CHECK(b.call_counter.before_run == 1);
  CHECK(session.raw_session().runs == 1);
}

TEST_CASE("K4 a request_stop in before_run does not cancel the current run; the stop applies after it") {
  FakeHook<> hook;
  runhooks::MonitoredSession session{FakeBackend{}, StopInBeforeRun{}, std::ref(hook)};
  CHECK(do_step(session) == 1);
  CHECK(hook.call_counter.after_run == 1);
  CHECK(hook.stop_requested_in_after_run);
  CHECK(session.should_stop());
}

TEST_CASE("1.1 hook i's after_run raising skips the hooks after i and leaves the stop flag as it was") {
  FakeHook<> before;
  FakeHook<> after;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(before), RaiseInAfterRun{}, std::ref(after)};
  CHECK_THROWS_WITH_AS(session.run(), "after_run failed", std::runtime_error);
  CHECK(before.call_counter.after_run == 1);
  CHECK(after.call_counter.after_run == 0);
  CHECK_FALSE(session.should_stop());  // the request made in that run is dropped
}

TEST_CASE("1.1 hook i's before_run raising skips the later before_runs, the step and every after_run") {
  FakeHook<> before;
  FakeHook<> after;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(before),
                                     RaiseOnceAtCountN(1, std::runtime_error("before_run failed")),
                                     std::ref(after)};
  CHECK_THROWS_AS(session.run(), std::runtime_error);
  CHECK(before.call_counter.before_run == 1);
  CHECK(after.call_counter.before_run == 0);
  CHECK(before.call_counter.after_run == 0);
  CHECK(session.raw_session().runs == 0);
}

TEST_CASE("1.2 a stop requested by a later hook's after_run is not seen by an earlier hook's after_run") {
  FakeHook<> a;
  FakeHook<> b;
  a.should_stop = true;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(b), std::ref(a)};
  session.run();
  CHECK(b.call_counter.after_run == 1);
  CHECK_FALSE(b.stop_requested_in_after_run);  // b ran before a requested it
  CHECK(session.should_stop());
}

TEST_CASE("K6 StopAtStepHook(num_steps=5) under recovery: last_step is not recomputed on re-creation") {
  std::optional<std::int64_t> checkpoint;
  int created = 0;
  auto creator = [&] {
    FakeBackend backend;
    backend.step = checkpoint.value_or(0);
    if (++created == 1) backend.throw_at(4, runhooks::AbortedError("lost"));
    return backend;
  };
  runhooks::MonitoredSession session{creator, runhooks::StopAtStepHook({.num_steps = 5})};
  CHECK(session.hook<0>().last_step() == 5);
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 2);
  checkpoint = 2;
  CHECK(do_step(session) == 3);
  // The 4th run loses the backend; the new one restores step 2, and the replay gives 3.
  CHECK(do_step(session) == 3);
  CHECK(created == 2);
  CHECK(session.hook<0>().last_step() == 5);  // not 2 + 5
  CHECK_FALSE(session.should_stop());
  CHECK(do_step(session) == 4);
  CHECK_FALSE(session.should_stop());
  CHECK(do_step(session) == 5);
  CHECK(session.should_stop());
}
