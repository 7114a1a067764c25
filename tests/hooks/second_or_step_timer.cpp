// SecondOrStepTimer and NeverTriggerTimer: TensorFlow's SecondOrStepTimerTest (cases A1-A5 of
// tf-semantics.md §3) with its numbers, the edge cases of §2.1, and the whichever_first extension.

#include <runhooks/clock.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <type_traits>

using runhooks::ManualClock;
using runhooks::NeverTriggerTimer;
using runhooks::SecondOrStepTimer;
using runhooks::TimerElapsed;
using runhooks::TimerOptions;

namespace {

// TensorFlow's MOCK_START_TIME: the tests mock time.time() to start there.
constexpr double mock_start_time = 1484695987.209386;

using Timer = SecondOrStepTimer<ManualClock>;

}  // namespace

TEST_CASE("A1 test_raise_in_both_secs_and_steps") {
  CHECK_THROWS_WITH_AS(Timer(TimerOptions{.every_secs = 2.0, .every_steps = 10}),
                       "Can not provide both every_secs and every_steps.",
                       std::invalid_argument);
  // The default clock too: the check does not depend on the clock policy.
  CHECK_THROWS_WITH_AS(SecondOrStepTimer<>(TimerOptions{.every_secs = 2.0, .every_steps = 10}),
                       "Can not provide both every_secs and every_steps.",
                       std::invalid_argument);
}

TEST_CASE("A2 test_raise_in_none_secs_and_steps") {
  CHECK_THROWS_WITH_AS(Timer(TimerOptions{}),
                       "Either every_secs or every_steps should be provided.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(SecondOrStepTimer<>(TimerOptions{}),
                       "Either every_secs or every_steps should be provided.",
                       std::invalid_argument);
}

TEST_CASE("A3 test_every_secs") {
  ManualClock clock(mock_start_time);
  Timer timer(TimerOptions{.every_secs = 1.0}, clock);
  CHECK(timer.should_trigger_for_step(1));

  timer.update_last_triggered_step(1);
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK_FALSE(timer.should_trigger_for_step(2));

  clock.advance(1.0);
  // The same step never re-triggers, however much time passed; a new one does at exactly
  // every_secs (>=).
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK(timer.should_trigger_for_step(2));
}

TEST_CASE("A4 test_every_steps") {
  ManualClock clock(mock_start_time);
  Timer timer(TimerOptions{.every_steps = 3}, clock);
  CHECK(timer.should_trigger_for_step(1));

  timer.update_last_triggered_step(1);
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK_FALSE(timer.should_trigger_for_step(2));
  CHECK_FALSE(timer.should_trigger_for_step(3));
  CHECK(timer.should_trigger_for_step(4));
}

TEST_CASE("A5 test_update_last_triggered_step") {
  // TensorFlow uses the real clock and asks only for elapsed_secs > 0; a manual clock moved by
  // known amounts pins the seconds too.
  ManualClock clock(mock_start_time);
  Timer timer(TimerOptions{.every_steps = 1}, clock);

  CHECK(!timer.last_triggered_step().has_value());
  CHECK((timer.update_last_triggered_step(1) == TimerElapsed{std::nullopt, std::nullopt}));
  CHECK(timer.last_triggered_step() == 1);

  clock.advance(0.25);
  const TimerElapsed second = timer.update_last_triggered_step(5);
  REQUIRE(second.secs.has_value());
  CHECK(*second.secs > 0.0);
  CHECK(*second.secs == doctest::Approx(0.25));
  CHECK(second.steps == 4);

  clock.advance(0.5);
  const TimerElapsed third = timer.update_last_triggered_step(7);
  REQUIRE(third.secs.has_value());
  CHECK(*third.secs > 0.0);
  CHECK(*third.secs == doctest::Approx(0.5));
  CHECK(third.steps == 2);
  CHECK(timer.last_triggered_step() == 7);
}

TEST_CASE("A5 test_update_last_triggered_step with the steady clock: elapsed seconds are positive") {
  SecondOrStepTimer<> timer(TimerOptions{.every_steps = 1});
  CHECK((timer.update_last_triggered_step(1) == TimerElapsed{}));
  // The steady clock never goes back; spin until it has visibly moved instead of sleeping.
  const double start = runhooks::SteadyClock::now();
  while (runhooks::SteadyClock::now() <= start) {
  }
  const TimerElapsed elapsed = timer.update_last_triggered_step(5);
  REQUIRE(elapsed.secs.has_value());
  CHECK(*elapsed.secs > 0.0);
  CHECK(elapsed.steps == 4);
}

TEST_CASE("A6 every_steps=0 is accepted: any other step triggers") {
  ManualClock clock(mock_start_time);
  Timer timer(TimerOptions{.every_steps = 0}, clock);
  CHECK(timer.should_trigger_for_step(1));
  timer.update_last_triggered_step(1);
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK(timer.should_trigger_for_step(2));
  // A step below the last trigger triggers: the global step went back (TF: never, by steps;
  // docs/coming-from-tensorflow.md, 'When the global step goes back').
  CHECK(timer.should_trigger_for_step(0));
  CHECK((timer.update_last_triggered_step(2) == TimerElapsed{0.0, 1}));
  CHECK_FALSE(timer.should_trigger_for_step(2));
  CHECK(timer.should_trigger_for_step(3));
}

TEST_CASE("A7 every_secs edges: exact boundary, same step beats time, time ignores step order") {
  ManualClock clock(mock_start_time);
  Timer timer(TimerOptions{.every_secs = 0.5}, clock);
  CHECK(timer.should_trigger_for_step(1));
  timer.update_last_triggered_step(1);
  clock.advance(0.25);
  CHECK_FALSE(timer.should_trigger_for_step(2));
  clock.advance(0.25);
  CHECK(timer.should_trigger_for_step(2));
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK(timer.should_trigger_for_step(0));

  const TimerElapsed at3 = timer.update_last_triggered_step(3);
  CHECK(at3.secs == doctest::Approx(0.5));
  CHECK(at3.steps == 2);
  CHECK_FALSE(timer.should_trigger_for_step(4));
  clock.advance(0.75);
  CHECK(timer.should_trigger_for_step(-1));
  const TimerElapsed back = timer.update_last_triggered_step(-1);
  CHECK(back.secs == doctest::Approx(0.75));
  CHECK(back.steps == -4);
  CHECK(timer.last_triggered_step() == -1);
}

TEST_CASE("reset() forgets the last trigger, so the next step triggers and reports nothing") {
  ManualClock clock;
  Timer timer(TimerOptions{.every_steps = 10}, clock);
  timer.update_last_triggered_step(1);
  CHECK_FALSE(timer.should_trigger_for_step(2));
  timer.reset();
  CHECK(!timer.last_triggered_step().has_value());
  CHECK(timer.should_trigger_for_step(2));
  CHECK((timer.update_last_triggered_step(2) == TimerElapsed{}));
}

TEST_CASE("copies of a ManualClock share one time") {
  ManualClock clock(1.0);
  Timer timer(TimerOptions{.every_secs = 1.0}, clock);
  timer.update_last_triggered_step(1);
  clock.set(2.0);
  CHECK(timer.clock().now() == 2.0);
  CHECK(timer.should_trigger_for_step(2));
}

TEST_CASE("NeverTriggerTimer never triggers and reports nothing") {
  static_assert(std::is_empty_v<NeverTriggerTimer>);
  NeverTriggerTimer timer;
  CHECK_FALSE(timer.should_trigger_for_step(0));
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK((timer.update_last_triggered_step(1) == TimerElapsed{}));
  CHECK_FALSE(timer.should_trigger_for_step(1000000));
  CHECK(!timer.last_triggered_step().has_value());
  timer.reset();
  CHECK(!timer.last_triggered_step().has_value());
  // All of it is usable at compile time.
  static_assert(!NeverTriggerTimer::should_trigger_for_step(42));
  static_assert(!NeverTriggerTimer::last_triggered_step().has_value());
}

TEST_CASE("whichever_first (beyond TensorFlow): fires on steps or on seconds, whichever comes first") {
  ManualClock clock(mock_start_time);
  auto timer = Timer::whichever_first(1.0, 3, clock);
  CHECK(timer.every_secs() == 1.0);
  CHECK(timer.every_steps() == 3);

  CHECK(timer.should_trigger_for_step(1));
  timer.update_last_triggered_step(1);
  CHECK_FALSE(timer.should_trigger_for_step(1));
  CHECK_FALSE(timer.should_trigger_for_step(3));

  SUBCASE("steps first: step 4 fires with no time elapsed") {
    CHECK(timer.should_trigger_for_step(4));
    CHECK((timer.update_last_triggered_step(4) == TimerElapsed{0.0, 3}));
    CHECK_FALSE(timer.should_trigger_for_step(5));
    clock.advance(0.999);
    CHECK_FALSE(timer.should_trigger_for_step(6));
    CHECK(timer.should_trigger_for_step(7));
  }
  SUBCASE("seconds first: step 2 fires once 1.0 s passed (>=)") {
    clock.advance(0.5);
    CHECK_FALSE(timer.should_trigger_for_step(2));
    clock.advance(0.5);
    CHECK(timer.should_trigger_for_step(2));
    const TimerElapsed elapsed = timer.update_last_triggered_step(2);
    CHECK(elapsed.secs == doctest::Approx(1.0));
    CHECK(elapsed.steps == 1);
    // Then steps again: 2 + 3 = 5 fires at once.
    CHECK_FALSE(timer.should_trigger_for_step(4));
    CHECK(timer.should_trigger_for_step(5));
  }
  SUBCASE("the same step never re-triggers, by either rule") {
    clock.advance(100.0);
    CHECK_FALSE(timer.should_trigger_for_step(1));
  }
}

TEST_CASE("whichever_first does not loosen the TensorFlow-compatible constructor") {
  CHECK_THROWS_WITH_AS(Timer(TimerOptions{.every_secs = 1.0, .every_steps = 3}),
                       "Can not provide both every_secs and every_steps.",
                       std::invalid_argument);
}

TEST_CASE("the clock policy costs nothing when it is stateless") {
  static_assert(std::is_same_v<SecondOrStepTimer<>, SecondOrStepTimer<runhooks::SteadyClock>>);
  struct WithoutClock {
    std::optional<double> every_secs;
    std::optional<std::int64_t> every_steps;
    bool triggered;
    std::int64_t last_step;
    double last_time;
  };
  static_assert(sizeof(SecondOrStepTimer<runhooks::SteadyClock>) == sizeof(WithoutClock));
}

TEST_CASE("(runhooks) a step below the last trigger triggers; the step threshold saturates") {
  ManualClock clock(mock_start_time);
  Timer timer(TimerOptions{.every_steps = 10}, clock);
  timer.update_last_triggered_step(100);
  CHECK_FALSE(timer.should_trigger_for_step(105));
  CHECK(timer.should_trigger_for_step(99));  // TF: false until 110
  CHECK((timer.update_last_triggered_step(99) == TimerElapsed{0.0, -1}));
  CHECK(timer.should_trigger_for_step(109));

  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  Timer huge(TimerOptions{.every_steps = max}, clock);
  huge.update_last_triggered_step(1);
  CHECK_FALSE(huge.should_trigger_for_step(2));  // 1 + max overflowed to a negative threshold
  CHECK_FALSE(huge.should_trigger_for_step(max - 1));
  CHECK(huge.should_trigger_for_step(max));
  Timer far(TimerOptions{.every_steps = 5}, clock);
  far.update_last_triggered_step(max - 2);
  CHECK_FALSE(far.should_trigger_for_step(max - 1));
  CHECK(far.should_trigger_for_step(max));  // saturated threshold
  CHECK((far.update_last_triggered_step(std::numeric_limits<std::int64_t>::min()).steps ==
         std::optional<std::int64_t>(std::numeric_limits<std::int64_t>::min())));
}
