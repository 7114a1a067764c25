// The README's quick start, compiled as written (main's body is quick_start_main's, plus the
// return that lets the test look at the trainer), and the zero-overhead claims about a session.
#include <runhooks/core.hpp>
#include <cstdint>

struct Trainer {
  std::int64_t step = 0;
  float loss = 1.0f;
  void run() { loss *= 0.999f; ++step; }
  std::int64_t global_step() const { return step; }
};

Trainer quick_start_main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::StopAtStepHook({.num_steps = 1000}),
                                     runhooks::StepCounterHook({.every_n_steps = 100})};
  while (!session.should_stop()) session.run();
  return session.raw_session();  // not in the README: what the test checks
}

// ---------------------------------------------------------------------------------------------

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <type_traits>

#include <support/fakes.hpp>

TEST_CASE("README quick start: runs exactly 1000 steps") {
  const fakes::LogCapture logs;
  const Trainer trainer = quick_start_main();
  CHECK(trainer.step == 1000);
  float expected_loss = 1.0f;
  for (int i = 0; i < 1000; ++i) expected_loss *= 0.999f;
  CHECK(trainer.loss == expected_loss);
  // StepCounterHook's default output is a "global_step/sec: <rate>" line.
  // One at steps 200, 300, ..., 1000: the trigger at step 100 starts the clock (TensorFlow's rule).
  CHECK(fakes::LogCapture::lines().size() == 9);
  for (const std::string& line : fakes::LogCapture::lines())
    CHECK(line.rfind("global_step/sec: ", 0) == 0);
}

namespace {
struct EmptyBeginHook {
  void begin() {}
};
struct EmptyRunHook {
  template <class Ctx>
  void before_run(Ctx&) {}
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {}
};
struct CountingHook {
  int runs = 0;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    ++runs;
  }
};
}  // namespace

// Zero overhead: hooks without state add nothing to the session.
static_assert(sizeof(runhooks::MonitoredSession<Trainer>) ==
              sizeof(Trainer) + sizeof(runhooks::detail::StopState));
static_assert(sizeof(runhooks::MonitoredSession<Trainer, EmptyBeginHook, EmptyRunHook>) ==
              sizeof(Trainer) + sizeof(runhooks::detail::StopState));
static_assert(sizeof(runhooks::SingularMonitoredSession<Trainer, EmptyBeginHook, EmptyRunHook>) ==
              sizeof(Trainer) + sizeof(runhooks::detail::StopState));

TEST_CASE("sizeof a session with empty hooks == sizeof(backend) + sizeof(StopState)") {
  runhooks::MonitoredSession session{Trainer{}, EmptyBeginHook{}, EmptyRunHook{}};
  CHECK(sizeof(session) == sizeof(Trainer) + sizeof(runhooks::detail::StopState));
  runhooks::MonitoredSession bare{Trainer{}};
  CHECK(sizeof(bare) == sizeof(Trainer) + sizeof(runhooks::detail::StopState));
}

TEST_CASE("hooks passed by std::ref are the caller's objects") {
  CountingHook hook;
  runhooks::MonitoredSession session{Trainer{}, std::ref(hook)};
  static_assert(std::is_same_v<decltype(session.hook<0>()), CountingHook&>);
  CHECK(&session.hook<0>() == &hook);
  session.run();
  session.run();
  CHECK(hook.runs == 2);
  // A hook passed by value is the session's own copy.
  CountingHook original;
  runhooks::MonitoredSession copied{Trainer{}, original};
  copied.run();
  CHECK(&copied.hook<0>() != &original);
  CHECK(copied.hook<0>().runs == 1);
  CHECK(original.runs == 0);
}

TEST_CASE("session.hook<Type>() reaches the one hook of that type, stored or by std::ref") {
  CountingHook counting;
  runhooks::MonitoredSession session{Trainer{}, runhooks::StopAtStepHook({.num_steps = 3}),
                                     std::ref(counting)};
  while (!session.should_stop()) session.run();
  CHECK(&session.hook<CountingHook>() == &counting);
  CHECK(session.hook<CountingHook>().runs == 3);
  CHECK(session.hook<runhooks::StopAtStepHook>().last_step() == 3);
  CHECK(&session.hook<runhooks::StopAtStepHook>() == &session.hook<0>());
}
