// MonitoredSession's exceptions, stop and close semantics (TensorFlow's MonitoredSessionTest,
// section 3 F of tf-semantics.md). TensorFlow's `with MonitoredSession() as s:` maps to
// runhooks::run_loop(s, body) (OutOfRangeError/StopIteration end it cleanly, end() is called,
// any other exception closes without end()) and, for the normal exit, to the session's scope.
//
// TensorFlow cases not ported here:
//   F33 test_recovery, F37's checkpoint files: runhooks has no checkpoints or Scaffold; a
//       session creator that restores state is ported in recovery.cpp (F37).
//   F35-F37 retries, F51-F65 step_fn: ported in recovery.cpp and step_fn.cpp.
//   F45 test_graph, F46 test_graph_finalized_during_run_unfinalized_after_exit,
//   F47 test_keep_finalized_graph_as_finalized: no graph, nothing to finalize.
//   F48 test_merge_run_options_from_hooks, F49 test_merge_caller_and_hook_run_options: runhooks
//       has no RunOptions/RunMetadata.
// Deliberate differences from TensorFlow, tested as runhooks documents them:
//   - Closing twice throws UsageError("Session is already closed.") without calling end()
//     again (TF calls end(None) on every hook, then raises RuntimeError).
//   - A C++ destructor cannot suppress an exception: an OutOfRangeError or StopIteration leaving
//     the session's scope closes it without end(); run_loop() is the clean-exit form.
//   - The destructor of a session closed inside its scope does not throw (TF's __exit__ raises
//     'Session is already closed'); run_loop() does raise it, as TF does.
//   - Errors from close() in the destructor (a coordinator's reported exception) are logged,
//     not thrown; close() and run_loop() throw them.
#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>

#include <support/fakes.hpp>

using namespace fakes;
using runhooks::SessionRunArgs;

namespace {
// A hook whose end() raises.
struct RaiseInEnd {
  int ends = 0;
  template <class Backend>
  void end(Backend&) {
    ++ends;
    throw std::runtime_error("end failed");
  }
};
}  // namespace

TEST_CASE("F32 test_defaults: a session with no hooks runs and reads the global step 0") {
  runhooks::MonitoredSession session{FakeBackend{}};
  CHECK(read_gstep(session) == 0);
  runhooks::MonitoredSession created{[] { return FakeBackend{}; }};
  CHECK(read_gstep(created) == 0);
}

TEST_CASE("F38 test_exit_cleanly_on_out_of_range_exception: run_loop ends cleanly and calls end()") {
  RaiseOnceAtCountN hook(2, runhooks::OutOfRangeError("EOI"));
  FakeHook<> counter;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook), std::ref(counter)};
  bool reached_after_raise = false;
  runhooks::run_loop(session, [&] {
    CHECK(read_gstep(session) == 0);
    CHECK_FALSE(session.should_stop());
    // Here at step 1 the hook raises OutOfRange; the next line is not executed.
    do_step(session);
    reached_after_raise = true;
  });
  CHECK_FALSE(reached_after_raise);
  CHECK(hook.raised);
  CHECK(session.should_stop());
  CHECK(session.closed());
  CHECK(counter.call_counter.after_run == 1);
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("F39 test_exit_cleanly_on_stop_iteration_exception: run_loop ends cleanly and calls end()") {
  RaiseOnceAtCountN hook(2, runhooks::StopIteration("I choose you"));
  FakeHook<> counter;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook), std::ref(counter)};
  bool reached_after_raise = false;
  runhooks::run_loop(session, [&] {
    CHECK(read_gstep(session) == 0);
    CHECK_FALSE(session.should_stop());
    do_step(session);
    reached_after_raise = true;
  });
  CHECK_FALSE(reached_after_raise);
  CHECK(hook.raised);
  CHECK(session.should_stop());
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("F38 (runhooks): an OutOfRangeError leaving the session's scope closes it without end()") {
  // TF's __exit__ suppresses it and calls end(); a destructor can do neither (see top).
  RaiseOnceAtCountN hook(2, runhooks::OutOfRangeError("EOI"));
  FakeHook<> counter;
  bool reached_after_raise = false;
  const auto scope = [&] {
    runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook), std::ref(counter)};
    CHECK(read_gstep(session) == 0);
    do_step(session);
    reached_after_raise = true;
  };
  CHECK_THROWS_AS(scope(), runhooks::OutOfRangeError);
  CHECK_FALSE(reached_after_raise);
  CHECK(counter.call_counter.end == 0);
}

TEST_CASE("F40 test_regular_exception_pass_through_run: 0, 1, 2, then the error propagates without end()") {
  RaiseOnceAtCountN hook(4, std::runtime_error("regular exception"));
  FakeHook<> counter;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook), std::ref(counter)};
  CHECK_THROWS_WITH_AS(runhooks::run_loop(session,
                                          [&] {
                                            CHECK(read_gstep(session) == 0);
                                            CHECK(do_step(session) == 1);
                                            CHECK(do_step(session) == 2);
                                            // This triggers the error.
                                            do_step(session);
                                            FAIL("not reached");
                                          }),
                       "regular exception", std::runtime_error);
  CHECK(hook.raised);
  CHECK(session.should_stop());
  CHECK(session.closed());
  CHECK(counter.call_counter.end == 0);
}

TEST_CASE("F41 test_regular_exception_reported_to_coord_pass_through_run: the run still succeeds, close raises it") {
  SUBCASE("run_loop") {
    runhooks::MonitoredSession session{FakeBackend{}};
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
  }
  SUBCASE("close()") {
    FakeHook<> counter;
    runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
    CHECK(read_gstep(session) == 0);
    session.coordinator().request_stop(
        std::make_exception_ptr(std::runtime_error("a thread wants to stop")));
    CHECK(read_gstep(session) == 0);
    CHECK_THROWS_WITH_AS(session.close(), "a thread wants to stop", std::runtime_error);
    CHECK(session.closed());
    CHECK(counter.call_counter.end == 1);
  }
  SUBCASE("the scope: the destructor logs it instead") {
    LogCapture logs;
    {
      runhooks::MonitoredSession session{FakeBackend{}};
      CHECK(read_gstep(session) == 0);
      session.coordinator().request_stop(
          std::make_exception_ptr(std::runtime_error("a thread wants to stop")));
      CHECK(read_gstep(session) == 0);
    }
    CHECK(logs.contains("a thread wants to stop"));
  }
}

TEST_CASE("F42 test_regular_exception_reported_to_coord_pass_through_return: should_stop is true without raising") {
  runhooks::MonitoredSession session{FakeBackend{}};
  CHECK(read_gstep(session) == 0);
  session.coordinator().request_stop(
      std::make_exception_ptr(std::runtime_error("a thread wants to stop")));
  bool stop = false;
  CHECK_NOTHROW(stop = session.should_stop());
  CHECK(stop);
  CHECK_THROWS_WITH_AS(session.close(), "a thread wants to stop", std::runtime_error);
}

TEST_CASE("F43 test_stop_cleanly_when_no_exception_in_with_body: 1, 2, then closed with end()") {
  SUBCASE("run_loop") {
    FakeHook<> counter;
    runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
    runhooks::run_loop(session, [&] {
      CHECK(do_step(session) == 1);
      CHECK(do_step(session) == 2);
      CHECK_FALSE(session.should_stop());
      session.request_stop();  // a run_loop body ends by a stop request, not by falling through
    });
    CHECK(session.should_stop());
    CHECK(session.closed());
    CHECK(counter.call_counter.end == 1);
  }
  SUBCASE("the scope") {
    FakeHook<> counter;
    const void* backend = nullptr;
    {
      runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
      backend = &session.raw_session();
      CHECK(do_step(session) == 1);
      CHECK(do_step(session) == 2);
      CHECK_FALSE(session.should_stop());
      CHECK(counter.call_counter.end == 0);
    }
    CHECK(counter.call_counter.end == 1);
    CHECK(counter.last_end_session == backend);
  }
}

TEST_CASE("F44 test_raises_regular_exceptions_in_with_body: the error propagates, the session closes without end()") {
  SUBCASE("run_loop") {
    FakeHook<> counter;
    runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
    CHECK_THROWS_WITH_AS(runhooks::run_loop(session,
                                            [&] {
                                              CHECK(do_step(session) == 1);
                                              CHECK(do_step(session) == 2);
                                              CHECK_FALSE(session.should_stop());
                                              throw std::runtime_error("unexpected exception");
                                            }),
                         "unexpected exception", std::runtime_error);
    CHECK(session.should_stop());
    CHECK(session.closed());
    CHECK(counter.call_counter.end == 0);
  }
  SUBCASE("the scope") {
    FakeHook<> counter;
    const auto scope = [&] {
      runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
      CHECK(do_step(session) == 1);
      CHECK(do_step(session) == 2);
      throw std::runtime_error("unexpected exception");
    };
    CHECK_THROWS_WITH_AS(scope(), "unexpected exception", std::runtime_error);
    CHECK(counter.call_counter.end == 0);
  }
}

TEST_CASE("F50 test_with_statement_and_close: close() inside the loop makes run_loop raise 'Session is already closed'") {
  FakeHook<> counter;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
  CHECK_THROWS_WITH_AS(runhooks::run_loop(session, [&] { session.close(); }),
                       "Session is already closed.", runhooks::UsageError);
  CHECK(counter.call_counter.end == 1);  // TF calls end() again on the second close
}

TEST_CASE("F50 (runhooks): close() inside the session's scope; the destructor neither throws nor calls end() again") {
  FakeHook<> counter;
  {
    runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
    session.close();
    CHECK(counter.call_counter.end == 1);
  }
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("1.6 close twice: the second close() throws UsageError and does not call end() again") {
  FakeHook<> counter;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(counter)};
  session.close();
  CHECK(session.closed());
  CHECK(session.should_stop());
  CHECK_THROWS_WITH_AS(session.close(), "Session is already closed.", runhooks::UsageError);
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("1.6 close: an end() that raises still closes the session, and the error propagates") {
  RaiseInEnd raiser;
  FakeHook<> counter;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(raiser), std::ref(counter)};
  CHECK_THROWS_WITH_AS(session.close(), "end failed", std::runtime_error);
  CHECK(session.closed());
  CHECK(raiser.ends == 1);
  CHECK(counter.call_counter.end == 0);  // TF: the loop over end() stops at the raising hook
}

TEST_CASE("1.4 run after a stop request: UsageError 'Run called even after should_stop requested.', no hook called") {
  FakeHook<> hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook)};
  hook.should_stop = true;
  do_step(session);
  CHECK(session.should_stop());
  CHECK_THROWS_WITH_AS(do_step(session), "Run called even after should_stop requested.",
                       runhooks::UsageError);
  CHECK(hook.call_counter.before_run == 1);
  CHECK(hook.call_counter.after_run == 1);
  CHECK(session.raw_session().runs == 1);
}

TEST_CASE("1.4 run after close: UsageError") {
  FakeHook<> hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook)};
  session.close();
  CHECK_THROWS_WITH_AS(do_step(session), "Run called on a closed session.", runhooks::UsageError);
  CHECK(hook.call_counter.before_run == 0);
}

TEST_CASE("tensorflow#14028 session.request_stop(): should_stop becomes true and run() is refused") {
  FakeHook<> hook;
  runhooks::MonitoredSession session{FakeBackend{}, std::ref(hook)};
  CHECK(do_step(session) == 1);
  CHECK_FALSE(session.should_stop());
  session.request_stop();
  CHECK(session.should_stop());
  CHECK_THROWS_WITH_AS(do_step(session), "Run called even after should_stop requested.",
                       runhooks::UsageError);
  CHECK(hook.call_counter.end == 0);
  session.close();
  CHECK(hook.call_counter.end == 1);
}

TEST_CASE("1.5 a coordinator stop without an exception makes should_stop true but does not block run()") {
  runhooks::MonitoredSession session{FakeBackend{}};
  session.coordinator().request_stop();
  CHECK(session.should_stop());
  CHECK(do_step(session) == 1);
  CHECK_NOTHROW(session.close());
}

TEST_CASE("1.5 should_stop is true after close()") {
  runhooks::MonitoredSession session{FakeBackend{}};
  CHECK_FALSE(session.should_stop());
  session.close();
  CHECK(session.should_stop());
}

TEST_CASE("1.1 an exception from the backend's step skips every after_run and passes through") {
  FakeBackend backend;
  backend.throw_at(2, std::runtime_error("step failed"));
  FakeHook<> hook;
  runhooks::MonitoredSession session{std::move(backend), std::ref(hook)};
  CHECK(do_step(session) == 1);
  CHECK_THROWS_WITH_AS(do_step(session), "step failed", std::runtime_error);
  CHECK(hook.call_counter.before_run == 2);
  CHECK(hook.call_counter.after_run == 1);
  CHECK_FALSE(session.should_stop());
  CHECK(do_step(session) == 2);
}
