// Recovery of a lost backend: retries on AbortedError/UnavailableError through a session creator
// (TensorFlow's MonitoredSessionTest F34-F37 and RecoverableSessionTest G68-G72 in section 3 of
// tf-semantics.md), and runhooks' RetryLimit policy.
//
// TensorFlow cases not ported here:
//   F33 test_recovery: checkpoint files and Scaffold; runhooks has neither. F37's restore is
//       ported with a fake checkpoint that the session creator restores from.
//   G66 _WrappedSession, G67 _CoordinatedSession: runhooks has no wrapper layers; their
//       observable rules (should_stop after close or a coordinator stop, close joins the threads,
//       a coordinator error re-thrown by close) are ported in monitored_session.cpp and
//       coordinator.cpp. test_propagates_exception_trace: Python tracebacks.
//   G73 the `_with_raw_session` variants: they monkeypatch _tf_sess so that
//       step_context.session runs through the hooks; runhooks' step_context.session() is always
//       the raw backend. (Two of the three variants call run_with_hooks: those are G72, ported.)
// Deliberate differences: TF retries creation forever; runhooks' default policy (RetryForever)
// does the same, RetryLimit gives up. After a failed re-creation TF's next run() would try to
// create a session again; runhooks' should_stop() is true and run() throws UsageError.
#include <doctest/doctest.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <thread>

#include <support/fakes.hpp>
#include <support/stop_during_recovery.hpp>

using namespace fakes;
using runhooks::SessionRunArgs;

namespace {

// TF's StopCoordinatorWithException: a side thread reports exception_to_raise to the
// coordinator once after_run has been called calls_before_stopping times; that after_run waits
// until the report is stored.
struct StopCoordinatorWithException {
  int calls_before_stopping;
  std::exception_ptr exception_to_raise;
  bool started_the_side_thread_already = false;
  bool stored_exception = false;
  std::mutex mutex;
  std::condition_variable_any changed;

  explicit StopCoordinatorWithException(
      int calls, std::exception_ptr error = std::make_exception_ptr(runhooks::AbortedError("Aborted at N")))
      : calls_before_stopping(calls), exception_to_raise(std::move(error)) {}

  template <class Backend>
  void after_create_session(Backend&, runhooks::Coordinator& coord) {
    if (started_the_side_thread_already) return;
    coord.start([this, &coord](std::stop_token token) {
      std::unique_lock lock(mutex);
      changed.wait(lock, token, [&] { return calls_before_stopping == 0; });
      if (calls_before_stopping != 0) return;  // the coordinator stopped first
      coord.request_stop(exception_to_raise);
      stored_exception = true;
      changed.notify_all();
    });
    started_the_side_thread_already = true;
  }

  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    std::unique_lock lock(mutex);
    if (--calls_before_stopping == 0) {
      changed.notify_all();
      changed.wait(lock, [&] { return stored_exception; });
    }
  }
};

// TF's FailTrainingAfterCoordinatorStopped: after the coordinator holds the AbortedError, the
// main thread "gets stuck" and its run fails with CancelledError.
struct FailTrainingAfterCoordinatorStopped : StopCoordinatorWithException {
  runhooks::Coordinator* coord_ = nullptr;

  explicit FailTrainingAfterCoordinatorStopped(int calls) : StopCoordinatorWithException(calls) {}

  template <class Backend>
  void after_create_session(Backend& session, runhooks::Coordinator& coord) {
    coord_ = &coord;
    StopCoordinatorWithException::after_create_session(session, coord);
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    StopCoordinatorWithException::after_run(run_context, run_values);
    try {
      coord_->raise_requested_exception();
    } catch (const runhooks::AbortedError&) {
      throw CancelledError("Session got garbage-collected.");
    }
  }
};

// TF's CheckpointSaverHook(save_steps=1) reduced to what F37 needs: saves the global step after
// the session is created and after every run.
struct SaveEveryStep {
  std::optional<std::int64_t>* checkpoint;
  template <class Backend>
  void after_create_session(Backend& session, runhooks::Coordinator&) {
    *checkpoint = session.global_step();
  }
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    *checkpoint = run_context.session().global_step();
  }
};

// Records which backend (by id) each after_create_session and end saw.
struct BackendIds {
  std::vector<int> created;
  int ended = -1;
  template <class Backend>
  void after_create_session(Backend& session, runhooks::Coordinator&) {
    created.push_back(session.id);
  }
  template <class Backend>
  void end(Backend& session) {
    ended = session.id;
  }
};

// TF's StackSessionCreator popping AbortAtNSession(sess, 1..3): the n-th backend aborts on its
// (n+1)-th run.
struct StackSessionCreator {
  std::deque<FakeBackend>* sessions_to_use;
  FakeBackend operator()() {
    if (sessions_to_use->empty()) throw std::out_of_range("pop from empty list");
    FakeBackend backend = std::move(sessions_to_use->front());
    sessions_to_use->pop_front();
    return backend;
  }
};

}  // namespace

TEST_CASE("F34 test_retry_initialization_on_aborted_error: creation is retried silently") {
  bool init_raised = false;
  int created = 0;
  auto creator = [&] {
    ++created;
    if (!init_raised) {
      init_raised = true;
      throw runhooks::AbortedError("Abort");
    }
    return FakeBackend{};
  };
  FakeHook<> counter;
  runhooks::MonitoredSession session{creator, std::ref(counter)};
  CHECK_FALSE(session.should_stop());
  CHECK(read_gstep(session) == 0);
  CHECK(init_raised);
  CHECK(created == 2);
  CHECK(counter.call_counter.begin == 1);
  CHECK(counter.call_counter.after_create_session == 1);
}

TEST_CASE_TEMPLATE("F35/F36 test_retry_on_aborted_error / test_retry_on_unavailable_error: the step is replayed on a fresh backend",
                   Error, runhooks::AbortedError, runhooks::UnavailableError) {
  RaiseOnceAtCountN hook(4, Error("Abort"));
  FakeHook<> counter;
  runhooks::MonitoredSession session{[] { return FakeBackend{}; }, std::ref(hook), std::ref(counter)};
  CHECK(read_gstep(session) == 0);
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 2);
  CHECK_FALSE(session.should_stop());
  // Here at step 3 the hook raises; the session is re-created from scratch (no checkpoint), so
  // the step is back to 0 and the replayed do_step moves it to 1.
  CHECK(do_step(session) == 1);
  CHECK_FALSE(session.should_stop());
  CHECK(hook.raised);
  CHECK(do_step(session) == 2);
  CHECK_FALSE(session.should_stop());

  CHECK(counter.call_counter.begin == 1);
  CHECK(counter.call_counter.after_create_session == 2);
  // 5 runs; in the one that raised, the hooks after the raising one got no before_run (1.1).
  CHECK(counter.call_counter.before_run == 5);
  CHECK(counter.call_counter.after_run == 5);
}

TEST_CASE("F37 test_recover_and_retry_on_aborted_error: the replay starts from the restored checkpoint") {
  std::optional<std::int64_t> checkpoint;
  auto creator = [&] {
    FakeBackend backend;
    backend.step = checkpoint.value_or(0);  // restore if a checkpoint exists
    return backend;
  };
  RaiseOnceAtCountN hook(4, runhooks::AbortedError("Abort"));
  runhooks::MonitoredSession session{creator, std::ref(hook), SaveEveryStep{&checkpoint}};
  CHECK(read_gstep(session) == 0);
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 2);
  CHECK_FALSE(session.should_stop());
  // The 4th run raises; the session recovers from the checkpoint at 2 and the replay gives 3.
  CHECK(do_step(session) == 3);
  CHECK_FALSE(session.should_stop());
  CHECK(hook.raised);
  CHECK(do_step(session) == 4);
  CHECK_FALSE(session.should_stop());
}

TEST_CASE("F35 (backend): an AbortedError from the backend's step is recovered like one from a hook") {
  int created = 0;
  auto creator = [&] {
    FakeBackend backend;
    backend.id = ++created;
    if (created == 1) backend.throw_at(3, runhooks::AbortedError("lost"));
    return backend;
  };
  BackendIds ids;
  runhooks::MonitoredSession session{creator, std::ref(ids)};
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 2);
  CHECK(do_step(session) == 1);  // replayed on backend 2
  CHECK(session.raw_session().id == 2);
  CHECK(ids.created == std::vector<int>{1, 2});
  session.close();
  CHECK(ids.ended == 2);  // end() gets the newest backend (TF: coordinated_creator.tf_sess)
}

TEST_CASE("1.7 recovery resets the hooks' stop flag (a new _HookedSession starts with _should_stop=False)") {
  // A step_fn whose hooked run made a hook request a stop, then lost the backend: the replay
  // runs on a session whose stop flag was reset.
  FakeHook<> stopper;
  stopper.should_stop = true;
  bool aborted = false;
  runhooks::MonitoredSession session{[] { return FakeBackend{}; }, std::ref(stopper)};
  session.run_step_fn([&](auto& step_context) {
    step_context.run_with_hooks();
    if (!aborted) {
      aborted = true;
      CHECK(session.should_stop());
      stopper.should_stop = false;
      throw runhooks::AbortedError("Abort");
    }
  });
  CHECK(aborted);
  CHECK(stopper.call_counter.after_run == 2);
  CHECK_FALSE(session.should_stop());
}

TEST_CASE("1.5 a preemption reported to the coordinator re-creates the backend even after a hook requested a stop") {
  FakeHook<> stopper;
  stopper.should_stop = true;
  runhooks::MonitoredSession session{[] { return FakeBackend{}; }, std::ref(stopper)};
  do_step(session);
  session.coordinator().request_stop(std::make_exception_ptr(runhooks::AbortedError("Abort")));
  // TF's _RecoverableSession._check_stop raises the coordinator's error before the hooked
  // session's flag is read: the session is re-created and should_stop() is false.
  CHECK_FALSE(session.should_stop());
  CHECK(stopper.call_counter.after_create_session == 2);
  CHECK(do_step(session) == 1);
  CHECK(session.should_stop());
}

TEST_CASE("RetryLimit gives up after max_retries consecutive re-creations") {
  int created = 0;
  auto creator = [&] {
    ++created;
    FakeBackend backend;
    backend.throw_at(1, runhooks::AbortedError("always lost"));
    return backend;
  };
  FakeHook<> counter;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{creator, runhooks::RetryLimit{.max_retries = 2}}, std::ref(counter)};
  CHECK(created == 1);
  CHECK_THROWS_WITH_AS(do_step(session), "always lost", runhooks::AbortedError);
  CHECK(created == 3);  // the first backend and 2 re-creations
  CHECK(counter.call_counter.after_create_session == 3);
  CHECK(counter.call_counter.before_run == 3);
  CHECK(counter.call_counter.after_run == 0);
}

TEST_CASE("RetryLimit counts consecutive failures only: each run() gets max_retries again") {
  int created = 0;
  auto creator = [&] {
    ++created;
    FakeBackend backend;
    backend.throw_at(2, runhooks::UnavailableError("lost"));
    return backend;
  };
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{creator, runhooks::RetryLimit{.max_retries = 1}}};
  CHECK(do_step(session) == 1);
  CHECK(do_step(session) == 1);  // backend 2, after one retry
  CHECK(do_step(session) == 1);  // backend 3, after one retry
  CHECK(created == 3);
}

TEST_CASE("RetryLimit: the delays grow by the multiplier up to the cap, then it gives up") {
  constexpr runhooks::RetryLimit policy{
      .max_retries = 4, .initial_backoff_secs = 1.0, .multiplier = 2.0, .max_backoff_secs = 3.0};
  static_assert(policy.next_delay(1) == 1.0);
  static_assert(policy.next_delay(2) == 2.0);
  static_assert(policy.next_delay(3) == 3.0);
  static_assert(policy.next_delay(4) == 3.0);
  static_assert(!policy.next_delay(5).has_value());
  static_assert(runhooks::RetryForever{}.next_delay(1000) == 0.0);
  static_assert(!runhooks::NoRecovery{}.next_delay(1).has_value());
  CHECK(policy.next_delay(2) == 2.0);
}

TEST_CASE("RetryLimit also bounds the first creation") {
  int created = 0;
  auto creator = [&]() -> FakeBackend {
    ++created;
    throw runhooks::UnavailableError("no server");
  };
  using Session = runhooks::MonitoredSession<runhooks::SessionCreator<decltype(creator), runhooks::RetryLimit>>;
  CHECK_THROWS_AS(Session(runhooks::SessionCreator{creator, runhooks::RetryLimit{.max_retries = 2}}),
                  runhooks::UnavailableError);
  CHECK(created == 3);
}

TEST_CASE("G68 RecoverableSessionTest.test_recovery: 51, 42, 33, 24, 11, 0, then 'pop from empty list' propagates") {
  std::deque<FakeBackend> sessions_to_use;
  for (int x = 0; x < 3; ++x) {
    FakeBackend backend;
    backend.id = x + 1;
    backend.throw_at(x + 2, runhooks::AbortedError("Aborted at N"));  // aborts after x + 1 runs
    sessions_to_use.push_back(std::move(backend));
  }
  CHECK(sessions_to_use.size() == 3);
  FakeHook<> counter;
  runhooks::MonitoredSession recoverable_sess{StackSessionCreator{&sessions_to_use}, std::ref(counter)};
  CHECK(sessions_to_use.size() == 2);  // one session popped
  // Using the first session.
  CHECK(run_v(recoverable_sess, 51) == 51);
  CHECK(sessions_to_use.size() == 2);
  // This fails and recovers by picking up the second session.
  CHECK(run_v(recoverable_sess, 42) == 42);
  CHECK(sessions_to_use.size() == 1);
  CHECK(run_v(recoverable_sess, 33) == 33);
  CHECK(sessions_to_use.size() == 1);
  // This fails and recovers by picking up the last session.
  CHECK(run_v(recoverable_sess, 24) == 24);
  CHECK(sessions_to_use.empty());
  CHECK(run_v(recoverable_sess, 11) == 11);
  CHECK(run_v(recoverable_sess, 0) == 0);
  // This fails with a real error: the pop fails.
  CHECK_THROWS_WITH_AS(run_v(recoverable_sess, 0), "pop from empty list", std::out_of_range);
  CHECK(counter.call_counter.after_create_session == 3);
  CHECK(counter.call_counter.begin == 1);

  // runhooks: without a backend the session should stop, run() is refused, close() calls no end().
  CHECK(recoverable_sess.should_stop());
  CHECK_THROWS_AS(run_v(recoverable_sess, 0), runhooks::UsageError);
  CHECK_NOTHROW(recoverable_sess.close());
  CHECK(counter.call_counter.end == 0);
}

TEST_CASE("G69 test_recovery_from_coordinator_exception: should_stop re-creates the session and returns false") {
  int number_of_sessions_created = 0;
  StopCoordinatorWithException hook(2);
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &number_of_sessions_created}, std::ref(hook)};
  CHECK(number_of_sessions_created == 1);
  CHECK_FALSE(session.should_stop());
  // The coordinator does not abort during this call.
  CHECK(run_v(session, 51) == 51);
  CHECK_FALSE(session.should_stop());
  // The coordinator aborts during the next call, which still completes.
  CHECK(run_v(session, 42) == 42);
  // The coordinator was asked to stop, yet the session is re-created and goes on.
  CHECK_FALSE(session.should_stop());
  CHECK(number_of_sessions_created == 2);
}

TEST_CASE("G70 test_recovery_from_non_preemption_in_coordinator: should_stop is true and close() raises the error") {
  int number_of_sessions_created = 0;
  StopCoordinatorWithException hook(2, std::make_exception_ptr(UnknownError("Some fatal error")));
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &number_of_sessions_created}, std::ref(hook)};
  CHECK(number_of_sessions_created == 1);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v(session, 51) == 51);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v(session, 42) == 42);
  // The coordinator was asked to stop with an error that is not a preemption: no recovery.
  CHECK(session.should_stop());
  CHECK(number_of_sessions_created == 1);
  CHECK_THROWS_WITH_AS(session.close(), "Some fatal error", UnknownError);
}

TEST_CASE("G71 test_recovery_from_session_getting_stuck: a CancelledError while the coordinator holds an AbortedError recovers") {
  // TF's _CoordinatedSession.run substitutes the coordinator's AbortedError for the hook's
  // CancelledError: a non-preemption error from a hook while the coordinator holds an
  // AbortedError recovers, and the run is replayed.
  int number_of_sessions_created = 0;
  FailTrainingAfterCoordinatorStopped hook(2);
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &number_of_sessions_created}, std::ref(hook)};
  CHECK(number_of_sessions_created == 1);
  CHECK_FALSE(session.should_stop());
  // Training does not fail, since it is call number 0.
  CHECK(run_v(session, 51) == 51);
  CHECK_FALSE(session.should_stop());
  // Training fails during the next call and is replayed on a new session.
  CHECK(run_v(session, 42) == 42);
  CHECK_FALSE(session.should_stop());
  CHECK(number_of_sessions_created == 2);
}

TEST_CASE("G71 (runhooks): a non-preemption error with no preemption in the coordinator passes through") {
  runhooks::MonitoredSession session{[] { return FakeBackend{}; },
                                     RaiseOnceAtCountN(1, CancelledError("cancelled"))};
  CHECK_THROWS_WITH_AS(do_step(session), "cancelled", CancelledError);
  CHECK(do_step(session) == 1);
}

namespace {
template <class Session>
double run_v_with_hooks(Session& session, double value) {
  return session.run_step_fn([value](auto& step_context) {
    return *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(value)})[V{}];
  });
}
}  // namespace

TEST_CASE("G72 test_step_fn_recovery_from_coordinator_exception_when_run_hooks: 51, 42, sessions 2, should_stop false") {
  int number_of_sessions_created = 0;
  StopCoordinatorWithException hook(2);
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &number_of_sessions_created}, std::ref(hook)};
  CHECK(number_of_sessions_created == 1);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v_with_hooks(session, 51) == 51);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v_with_hooks(session, 42) == 42);
  CHECK_FALSE(session.should_stop());
  CHECK(number_of_sessions_created == 2);
}

TEST_CASE("G72 test_recovery_from_non_preemption_in_coordinator_when_run_hooks: should_stop true, close() raises") {
  int number_of_sessions_created = 0;
  StopCoordinatorWithException hook(2, std::make_exception_ptr(UnknownError("Some fatal error")));
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &number_of_sessions_created}, std::ref(hook)};
  CHECK(number_of_sessions_created == 1);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v_with_hooks(session, 51) == 51);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v_with_hooks(session, 42) == 42);
  CHECK(session.should_stop());
  CHECK(number_of_sessions_created == 1);
  CHECK_THROWS_WITH_AS(session.close(), "Some fatal error", UnknownError);
}

TEST_CASE("G72 test_recovery_from_session_getting_stuck_when_run_hooks: 51, 42, sessions 2, should_stop false") {
  int number_of_sessions_created = 0;
  FailTrainingAfterCoordinatorStopped hook(2);
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &number_of_sessions_created}, std::ref(hook)};
  CHECK(number_of_sessions_created == 1);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v_with_hooks(session, 51) == 51);
  CHECK_FALSE(session.should_stop());
  CHECK(run_v_with_hooks(session, 42) == 42);
  CHECK_FALSE(session.should_stop());
  CHECK(number_of_sessions_created == 2);
}

namespace {
// Throws error the n-th time after_create_session is called (n counts from 1), once.
struct ThrowInAfterCreateSession {
  int throw_on_call;
  std::exception_ptr error;
  int calls = 0;
  template <class Backend>
  void after_create_session(Backend&) {
    if (++calls == throw_on_call) std::rethrow_exception(error);
  }
};
}  // namespace

TEST_CASE("(runhooks) should_stop's recovery obeys the retry policy too") {
  int created = 0;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{CountingSessionCreator{[] { return FakeBackend{}; }, &created},
                               runhooks::NoRecovery{}},
      FakeHook<>{}};
  session.coordinator().request_stop(std::make_exception_ptr(runhooks::AbortedError("lost")));
  CHECK(session.should_stop());  // NoRecovery: no re-creation, the session stops
  CHECK(created == 1);
  CHECK_THROWS_AS(session.raw_session(), runhooks::UsageError);  // no backend is left
}

TEST_CASE("(runhooks) RetryLimit bounds should_stop's recovery") {
  int created = 0;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{CountingSessionCreator{[] { return FakeBackend{}; }, &created},
                               runhooks::RetryLimit{.max_retries = 1}},
      FakeHook<>{}};
  session.coordinator().request_stop(std::make_exception_ptr(runhooks::AbortedError("lost")));
  CHECK_FALSE(session.should_stop());  // one retry allowed: re-created
  CHECK(created == 2);
  CHECK(run_v(session, 7) == 7);
}

TEST_CASE("1.7 (runhooks) a preemption from a hook's after_create_session during recovery is retried") {
  // TensorFlow's _create_session retries the whole creation, hooks' after_create_session included.
  int created = 0;
  ThrowInAfterCreateSession hook{2, std::make_exception_ptr(runhooks::UnavailableError("again"))};
  RaiseOnceAtCountN raiser(1, runhooks::AbortedError("lost"));
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &created}, std::ref(hook), std::ref(raiser)};
  CHECK(run_v(session, 3) == 3);  // lost once, then the first re-creation fails in the hook
  CHECK(created == 3);
  CHECK(hook.calls == 3);
  CHECK_FALSE(session.should_stop());
}

TEST_CASE("(runhooks) a recovery that fails in after_create_session leaves the session stopped") {
  int created = 0;
  ThrowInAfterCreateSession hook{2, std::make_exception_ptr(std::runtime_error("cannot restore"))};
  RaiseOnceAtCountN raiser(1, runhooks::AbortedError("lost"));
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &created}, std::ref(hook), std::ref(raiser)};
  CHECK_THROWS_WITH(session.run(), "cannot restore");
  CHECK(session.should_stop());
  CHECK_THROWS_AS(session.run(), runhooks::UsageError);
}

TEST_CASE("(runhooks) the caller's request_stop survives a recovery; the hooks' requests do not") {
  int created = 0;
  runhooks::MonitoredSession session{
      CountingSessionCreator{[] { return FakeBackend{}; }, &created}, FakeHook<>{}};
  session.request_stop();
  session.coordinator().request_stop(std::make_exception_ptr(runhooks::AbortedError("lost")));
  CHECK(session.should_stop());  // re-created, but the caller asked to stop
  CHECK(created == 2);
}

// Issue 17, item 4 (runhooks; TensorFlow retries regardless): a stop always wins. A stop asked
// for while the session creates or re-creates its backend ends the retries at once, a back-off
// included, and the session stops without a backend, with one log line. Each case would wait
// 11 days (or retry forever) without it: stops::HangGuard fails it after 20 s instead. The
// signal's cases are in tests/hooks/signal_stop_hook.cpp, with a real process in
// recovery_signal.cpp.

TEST_CASE("stop wins: request_stop() from another thread wakes run()'s back-off; run() returns without the step") {
  stops::WatchedLog log;
  int calls = 0;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{stops::FailingFactory{&calls, 1}, stops::ForeverEvery11Days{}},
      FakeHook<>{}};
  std::thread stopper([&] {
    log.wait_for("runhooks: backend lost; re-creating it (attempt 1,");
    session.request_stop();
  });
  stops::HangGuard guard("run() stayed in its back-off after request_stop() from another thread");
  const auto values = session.run(SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(2.0)});
  guard.release();
  stopper.join();
  CHECK_FALSE(values[V{}].has_value());  // the step never ran
  CHECK(session.should_stop());
  CHECK(calls == 1);  // no re-creation was attempted
  CHECK(log.count("stopped during recovery") == 1);
  CHECK(log.count("runhooks: stopped during recovery (request_stop() was called): the backend is not "
                  "created again after 1 failure, and the session stops without one. Last error: "
                  "the step lost its backend") == 1);
  CHECK_THROWS_WITH_AS(session.run(), "Run called even after should_stop requested.",
                       runhooks::UsageError);
  CHECK_THROWS_WITH_AS(session.raw_session(),
                       "The session has no backend: re-creating it failed, or a stop ended its "
                       "recovery.",
                       runhooks::UsageError);
  CHECK_NOTHROW(session.close());
  CHECK(session.hook<0>().call_counter.end == 0);  // no backend to end
}

TEST_CASE("stop wins: request_stop() from another thread ends the constructor's endless retries (RetryForever)") {
  using Session = runhooks::MonitoredSession<runhooks::SessionCreator<stops::FailingFactory>>;
  stops::WatchedLog log;
  int calls = 0;
  // The stopping thread needs the session's address while its constructor still runs.
  alignas(Session) unsigned char storage[sizeof(Session)];
  Session* const address = reinterpret_cast<Session*>(storage);
  std::thread stopper([&] {
    log.wait_for("(attempt 3, after 0 s)");
    address->request_stop();
  });
  stops::HangGuard guard("the constructor kept retrying after request_stop() from another thread");
  Session& session = *::new (storage) Session(stops::FailingFactory{&calls});
  guard.release();
  stopper.join();
  CHECK(session.should_stop());
  CHECK(calls >= 3);
  CHECK(log.count("stopped during recovery") == 1);
  CHECK(log.count("runhooks: stopped during recovery (request_stop() was called): the backend is not "
                  "created again after ") == 1);
  runhooks::run_loop(session);  // no step; closes cleanly
  CHECK(session.closed());
  std::destroy_at(&session);
}

TEST_CASE("stop wins: the coordinator's request_stop() from another thread wakes run()'s back-off") {
  stops::WatchedLog log;
  int calls = 0;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{stops::FailingFactory{&calls, 1}, stops::ForeverEvery11Days{}}};
  runhooks::Coordinator& coord = session.coordinator();
  std::thread stopper([&] {
    log.wait_for("runhooks: backend lost; re-creating it (attempt 1,");
    coord.request_stop();
  });
  stops::HangGuard guard("run() stayed in its back-off after the coordinator was stopped");
  session.run();
  guard.release();
  stopper.join();
  CHECK(session.should_stop());
  CHECK(calls == 1);
  CHECK(log.count("stopped during recovery") == 1);
  CHECK(log.count("runhooks: stopped during recovery (the coordinator was stopped): ") == 1);
  CHECK_NOTHROW(session.close());
}

TEST_CASE("stop wins: an error reported to the coordinator during recovery ends it and is raised by close()") {
  stops::WatchedLog log;
  int calls = 0;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{stops::FailingFactory{&calls, 1}, stops::ForeverEvery11Days{}}};
  runhooks::Coordinator& coord = session.coordinator();
  std::thread stopper([&] {
    log.wait_for("runhooks: backend lost; re-creating it (attempt 1,");
    coord.request_stop(std::make_exception_ptr(std::runtime_error("watchdog: no progress for 10 min")));
  });
  stops::HangGuard guard("run() stayed in its back-off after the coordinator was stopped with an error");
  session.run();
  guard.release();
  stopper.join();
  CHECK(session.should_stop());
  CHECK(log.count("stopped during recovery (the coordinator was stopped)") == 1);
  CHECK_THROWS_WITH_AS(session.close(), "watchdog: no progress for 10 min", std::runtime_error);
}

TEST_CASE("stop wins: run_step_fn does not run step_fn again; without a result to return it throws StopIteration") {
  stops::WatchedLog log;
  int calls = 0;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{stops::FailingFactory{&calls, 1}, stops::ForeverEvery11Days{}}};
  std::thread stopper([&] {
    log.wait_for("runhooks: backend lost; re-creating it (attempt 1,");
    session.request_stop();
  });
  stops::HangGuard guard("run_step_fn stayed in its back-off after request_stop() from another thread");
  int bodies = 0;
  CHECK_THROWS_AS(session.run_step_fn([&](auto& step_context) {
    ++bodies;
    step_context.run_with_hooks();
    return 42;
  }),
                  runhooks::StopIteration);
  guard.release();
  stopper.join();
  CHECK(bodies == 1);
  CHECK(session.should_stop());
  CHECK(log.count("stopped during recovery") == 1);
}
