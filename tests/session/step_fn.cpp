// run_step_fn and StepContext (TensorFlow's MonitoredSessionTest F51-F65, section 3 F of
// tf-semantics.md, and section 1.8).
//
// TensorFlow cases not ported here:
//   F56 test_step_with_extra_arguments, F58 test_step_fn_belongs_to_a_class_and_has_extra_methods:
//       a step_fn that does not take exactly the step context is a compile error in runhooks
//       (a static_assert in run_step_fn), not a ValueError; it belongs with the compile-fail
//       tests (tests/compile_fail/), not here.
// Deliberate difference: TF's `with` block maps to run_loop() (monitored_session.cpp explains).
// StepContext::request_stop() throws runhooks::StopIteration, as TF raises StopIteration.
#include <doctest/doctest.h>

#include <functional>
#include <string>

#include <support/fakes.hpp>

using namespace fakes;
using runhooks::SessionRunArgs;

namespace {

// F59's hook: before_run adds stage_1_0 (+0.7) to the step; after_run reads var (1.5) and
// raw-runs stage_2 (+1.1), giving 2.6.
struct StageHook {
  double var_in_after_run = 0.0;
  double after_stage_2 = 0.0;
  template <class Ctx>
  auto before_run(Ctx&) {
    return SessionRunArgs{runhooks::feed<HookAdd>(0.7)};
  }
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    var_in_after_run = run_context.session().var;
    run_context.session().var += 1.1;  // raw run of stage_2: no hooks
    after_stage_2 = run_context.session().var;
  }
};

// F59's step_fn: raw-runs stage_0 (+0.3), then run_with_hooks(stage_1_1) (+0.5).
template <class StepContext>
double stage_step_fn(StepContext& step_context) {
  step_context.session().var += 0.3;
  return *step_context.run_with_hooks(
      SessionRunArgs{runhooks::fetch<Var>(), runhooks::feed<CallerAdd>(0.5)})[Var{}];
}

// F65's hook: the first before_run raises AbortedError, later ones fetch vv (3.2), and
// after_run checks the result.
struct AbortOnceThenFetchVV {
  bool* run_already;
  int results_checked = 0;
  template <class Ctx>
  auto before_run(Ctx&) {
    if (!*run_already) {
      *run_already = true;
      throw runhooks::AbortedError("Abort");
    }
    return SessionRunArgs{runhooks::fetch<VV>()};
  }
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values& run_values) {
    CHECK(*run_values[VV{}] == doctest::Approx(3.2));
    ++results_checked;
  }
};

// F57: a step_fn that is a member function.
struct Model {
  template <class StepContext>
  double step_fn(StepContext& step_context) {
    return *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(3.2)})[V{}];
  }
};

auto make_backend = [] { return FakeBackend{}; };

}  // namespace

TEST_CASE("F51 test_step_fn_example: run_with_hooks(v, {c: 3.2}) returns 3.2") {
  runhooks::MonitoredSession session{make_backend};
  const double value = session.run_step_fn([](auto& step_context) {
    return *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(3.2)})[V{}];
  });
  CHECK(value == doctest::Approx(3.2));
}

TEST_CASE("F52 test_step_function_stops: request_stop() ends run_loop cleanly; nothing after it runs") {
  FakeHook<> counter;
  runhooks::MonitoredSession session{make_backend, std::ref(counter)};
  bool reached = false;
  runhooks::run_loop(session, [&] {
    session.run_step_fn([](auto& step_context) { step_context.request_stop(); });
    reached = true;
  });
  CHECK_FALSE(reached);
  CHECK(session.should_stop());
  CHECK(counter.call_counter.end == 1);
}

TEST_CASE("F53 test_step_request_stop_without_a_with_block: StopIteration reaches the caller, should_stop stays false") {
  runhooks::MonitoredSession session{make_backend};
  bool stopped = false;
  try {
    session.run_step_fn([](auto& step_context) { step_context.request_stop(); });
  } catch (const runhooks::StopIteration& e) {
    stopped = true;
    CHECK(std::string(e.what()) == "step_fn has requested the iterations to stop.");
  }
  CHECK(stopped);
  CHECK_FALSE(session.should_stop());
}

TEST_CASE("F54 test_step_request_stop_in_a_loop: the first step_fn ends the loop; the fail line is never reached") {
  runhooks::MonitoredSession session{make_backend};
  int calls = 0;
  runhooks::run_loop(session, [&] {
    session.run_step_fn([&](auto& step_context) {
      ++calls;
      step_context.request_stop();
    });
    FAIL("not reached");
  });
  CHECK(calls == 1);
  CHECK(session.closed());
}

TEST_CASE("F55 test_step_request_stop_with_returning_a_type: run_step_fn returns what step_fn returns") {
  runhooks::MonitoredSession session{make_backend};
  CHECK(session.run_step_fn([](auto&) { return std::string("a type"); }) == "a type");
}

TEST_CASE("F57 test_step_fn_belongs_to_a_class: a member function step_fn returns 3.2") {
  runhooks::MonitoredSession session{make_backend};
  Model model;
  const double value =
      session.run_step_fn([&](auto& step_context) { return model.step_fn(step_context); });
  CHECK(value == doctest::Approx(3.2));
}

TEST_CASE("F59 test_step_fn_with_hooks: step_fn returns 1.5; after_run reads 1.5 and raw-runs to 2.6") {
  StageHook hook;
  runhooks::MonitoredSession session{make_backend, std::ref(hook)};
  const double value =
      session.run_step_fn([](auto& step_context) { return stage_step_fn(step_context); });
  CHECK(value == doctest::Approx(1.5));
  CHECK(hook.var_in_after_run == doctest::Approx(1.5));
  CHECK(hook.after_stage_2 == doctest::Approx(2.6));
}

TEST_CASE("F60 test_step_fn_has_the_same_hooks_behavior_without_recovery: F59 under SingularMonitoredSession") {
  StageHook hook;
  runhooks::SingularMonitoredSession session{FakeBackend{}, std::ref(hook)};
  const double value =
      session.run_step_fn([](auto& step_context) { return stage_step_fn(step_context); });
  CHECK(value == doctest::Approx(1.5));
  CHECK(hook.var_in_after_run == doctest::Approx(1.5));
  CHECK(hook.after_stage_2 == doctest::Approx(2.6));
}

TEST_CASE("F61 test_step_fn_with_hooks_and_request_stop: a stop before run_with_hooks calls no hook") {
  FakeHook<> hook;
  runhooks::MonitoredSession session{make_backend, std::ref(hook)};
  runhooks::run_loop(session, [&] {
    session.run_step_fn([](auto& step_context) {
      step_context.request_stop();
      step_context.run_with_hooks();
    });
  });
  CHECK(hook.call_counter.before_run == 0);
  CHECK(hook.call_counter.after_run == 0);
}

TEST_CASE("1.8 step_context.session() is the raw backend: runs through it call no hook") {
  FakeHook<> hook;
  runhooks::MonitoredSession session{make_backend, std::ref(hook)};
  session.run_step_fn([&](auto& step_context) {
    CHECK(&step_context.session() == &session.raw_session());
    step_context.session().run();
    step_context.session().run();
  });
  CHECK(session.raw_session().step == 2);
  CHECK(hook.call_counter.before_run == 0);
  CHECK(hook.call_counter.after_run == 0);
  // The session's raw_session() bypasses the hooks too.
  session.raw_session().run();
  CHECK(session.raw_session().step == 3);
  CHECK(hook.call_counter.before_run == 0);
}

TEST_CASE("1.8 run_with_hooks calls every hook and honours a hook's stop request") {
  FakeHook<> hook;
  hook.should_stop = true;
  runhooks::MonitoredSession session{make_backend, std::ref(hook)};
  session.run_step_fn([](auto& step_context) { step_context.run_with_hooks(); });
  CHECK(hook.call_counter.before_run == 1);
  CHECK(hook.call_counter.after_run == 1);
  CHECK(session.should_stop());
  CHECK_THROWS_WITH_AS(
      session.run_step_fn([](auto& step_context) { step_context.run_with_hooks(); }),
      "Run called even after should_stop requested.", runhooks::UsageError);
  CHECK(hook.call_counter.before_run == 1);
}

TEST_CASE("F62 test_recovers_from_an_exception_in_step_fn: the step_fn is retried and returns 3.2") {
  bool run_already = false;
  runhooks::MonitoredSession session{make_backend};
  const double value = session.run_step_fn([&](auto& step_context) {
    if (!run_already) {
      run_already = true;
      throw runhooks::AbortedError("Abort");
    }
    return *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(3.2)})[V{}];
  });
  CHECK(value == doctest::Approx(3.2));
}

TEST_CASE("F63 test_recovers_from_an_exception_in_step_fn_after_hooks: 3.2, the body ran 2 times, graph_state 0.62") {
  bool run_already = false;
  int side_effect_counter = 0;
  double graph_state = 0.0;  // lives across re-creations, as TF's CountingSessionCreator's session
  int number_of_sessions_created = 0;
  runhooks::MonitoredSession session{CountingSessionCreator{[&] {
                                                              FakeBackend backend;
                                                              backend.graph_state = &graph_state;
                                                              return backend;
                                                            },
                                                            &number_of_sessions_created}};
  const double value = session.run_step_fn([&](auto& step_context) {
    ++side_effect_counter;
    step_context.session().bump_graph_state(0.31);
    const double v = *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(3.2)})[V{}];
    if (!run_already) {
      run_already = true;
      throw runhooks::AbortedError("Abort");
    }
    return v;
  });
  CHECK(value == doctest::Approx(3.2));
  CHECK(side_effect_counter == 2);
  CHECK(graph_state == doctest::Approx(0.62));
  CHECK(number_of_sessions_created == 2);
}

TEST_CASE("F64 test_step_fn_doesnt_recover_when_it_wasnt_asked_to: SingularMonitoredSession lets the AbortedError out") {
  bool run_already = false;
  runhooks::SingularMonitoredSession session{make_backend};
  const auto step_fn = [&](auto& step_context) {
    if (!run_already) {
      run_already = true;
      throw runhooks::AbortedError("Abort");
    }
    return *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(3.2)})[V{}];
  };
  CHECK_THROWS_AS(session.run_step_fn(step_fn), runhooks::AbortedError);
}

TEST_CASE("F65 test_step_fn_exception_from_before_run: the whole step_fn is re-run: 1.3, counter 2, graph_state 0.62") {
  bool run_already = false;
  int side_effect_counter = 0;
  double graph_state = 0.0;
  int number_of_sessions_created = 0;
  AbortOnceThenFetchVV hook{&run_already};
  runhooks::MonitoredSession session{CountingSessionCreator{[&] {
                                                              FakeBackend backend;
                                                              backend.graph_state = &graph_state;
                                                              return backend;
                                                            },
                                                            &number_of_sessions_created},
                                     std::ref(hook)};
  const double value = session.run_step_fn([&](auto& step_context) {
    ++side_effect_counter;
    step_context.session().bump_graph_state(0.31);
    return *step_context.run_with_hooks(
        SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(1.3)})[V{}];
  });
  CHECK(value == doctest::Approx(1.3));
  CHECK(side_effect_counter == 2);
  CHECK(graph_state == doctest::Approx(0.62));
  CHECK(hook.results_checked == 1);
}
