// SingularMonitoredSession: the same protocol, never recovers (TensorFlow's
// SingularMonitoredSessionTest, section 3 H of tf-semantics.md).
//
// TensorFlow cases not ported here:
//   H79 test_graph: no graph. (Its test_raw_session half is ported below.)
// Deliberate differences: TF's raw_session() is None after close (H78); runhooks' raw_session()
// returns the backend and stays valid after close(), so H78 checks closed() instead. The
// `with` block maps to run_loop() as in monitored_session.cpp.
#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>
#include <type_traits>

#include <support/fakes.hpp>

using namespace fakes;

namespace {
// A hook whose before_run raises AbortedError (H75).
struct RaiseAbortedInBeforeRun {
  template <class Ctx>
  void before_run(Ctx&) {
    throw runhooks::AbortedError("Abort");
  }
};
}  // namespace

TEST_CASE("H74 test_handles_initialization: the global step reads 0") {
  runhooks::SingularMonitoredSession session{FakeBackend{}};
  CHECK(read_gstep(session) == 0);
  static_assert(!decltype(session)::recoverable);
}

TEST_CASE("H75 test_do_not_handle_aborted_error: an AbortedError from before_run propagates, caught or not") {
  SUBCASE("caught inside the loop body") {
    FakeHook<> counter;
    runhooks::SingularMonitoredSession session{FakeBackend{}, RaiseAbortedInBeforeRun{},
                                               std::ref(counter)};
    runhooks::run_loop(session, [&] {
      CHECK_THROWS_AS(read_gstep(session), runhooks::AbortedError);
      session.request_stop();
    });
    CHECK(counter.call_counter.end == 1);
    CHECK(counter.call_counter.after_create_session == 1);
  }
  SUBCASE("uncaught: it leaves run_loop, not suppressed, not recovered, no end()") {
    FakeHook<> counter;
    runhooks::SingularMonitoredSession session{FakeBackend{}, RaiseAbortedInBeforeRun{},
                                               std::ref(counter)};
    CHECK_THROWS_AS(runhooks::run_loop(session, [&] { read_gstep(session); }),
                    runhooks::AbortedError);
    CHECK(counter.call_counter.end == 0);
    CHECK(counter.call_counter.after_create_session == 1);
    CHECK(session.closed());
  }
  SUBCASE("a session creator is not used to recover either") {
    int created = 0;
    runhooks::SingularMonitoredSession session{[&] {
      ++created;
      return FakeBackend{};
    }, RaiseAbortedInBeforeRun{}};
    CHECK_THROWS_AS(read_gstep(session), runhooks::AbortedError);
    CHECK(created == 1);
  }
}

TEST_CASE("H76 test_exit_cleanly_on_out_of_range_exception: run_loop ends cleanly, should_stop true after") {
  RaiseOnceAtCountN hook(2, runhooks::OutOfRangeError("EOI"));
  FakeHook<> counter;
  runhooks::SingularMonitoredSession session{FakeBackend{}, std::ref(hook), std::ref(counter)};
  bool reached_after_raise = false;
  runhooks::run_loop(session, [&] {
    CHECK(read_gstep(session) == 0);
    CHECK_FALSE(session.should_stop());
    do_step(session);
    reached_after_raise = true;
  });
  CHECK_FALSE(reached_after_raise);
  CHECK(session.should_stop());
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("H77 test_regular_exception_reported_to_coord_pass_through_run: the run succeeds, close raises it") {
  SUBCASE("run_loop") {
    // Here should_stop() raises it (as TF's would in `while not session.should_stop()`), so the
    // session closes as after any other error: without end().
    const LogCapture logs;
    FakeHook<> counter;
    runhooks::SingularMonitoredSession session{FakeBackend{}, std::ref(counter)};
    CHECK_THROWS_WITH_AS(
        runhooks::run_loop(session,
                           [&] {
                             CHECK(read_gstep(session) == 0);
                             session.coordinator().request_stop(std::make_exception_ptr(
                                 std::runtime_error("a thread wants to stop")));
                             CHECK(read_gstep(session) == 0);
                           }),
        "a thread wants to stop", std::runtime_error);
    CHECK(session.closed());
    CHECK(counter.call_counter.end == 0);
  }
  SUBCASE("close()") {
    runhooks::SingularMonitoredSession session{FakeBackend{}};
    CHECK(read_gstep(session) == 0);
    session.coordinator().request_stop(
        std::make_exception_ptr(std::runtime_error("a thread wants to stop")));
    CHECK(read_gstep(session) == 0);
    CHECK_THROWS_WITH_AS(session.close(), "a thread wants to stop", std::runtime_error);
  }
}

TEST_CASE("1.5 [derived] SingularMonitoredSession::should_stop re-throws the coordinator's exception") {
  const LogCapture logs;  // the destructor logs the error close() would throw
  runhooks::SingularMonitoredSession session{FakeBackend{}};
  session.coordinator().request_stop(
      std::make_exception_ptr(std::runtime_error("a thread wants to stop")));
  CHECK_THROWS_WITH_AS(session.should_stop(), "a thread wants to stop", std::runtime_error);
  // Without an exception it only reports the stop.
  runhooks::SingularMonitoredSession clean{FakeBackend{}};
  clean.coordinator().request_stop();
  CHECK(clean.should_stop());
}

TEST_CASE("H78 test_stop_cleanly_when_no_exception_in_with_body: 1, 2, then should_stop true and closed") {
  FakeHook<> counter;
  runhooks::SingularMonitoredSession session{FakeBackend{}, std::ref(counter)};
  runhooks::run_loop(session, [&] {
    CHECK(do_step(session) == 1);
    CHECK(do_step(session) == 2);
    CHECK_FALSE(session.should_stop());
    session.request_stop();
  });
  CHECK(session.should_stop());
  CHECK(session.closed());  // TF: raw_session() is None
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("H79 test_raw_session: raw_session() is the backend") {
  runhooks::SingularMonitoredSession session{FakeBackend{}};
  static_assert(std::is_same_v<decltype(session.raw_session()), FakeBackend&>);
  CHECK(do_step(session) == 1);
  CHECK(session.raw_session().step == 1);
}
