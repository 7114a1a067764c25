// LoggingTensorHook: TensorFlow's LoggingTensorHookTest (case J88 of tf-semantics.md §3) with its
// numbers, the lazy fetch (a counting backend), the numpy-style values, the per-step clock bound
// of every_n_secs, and option validation.

#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "support/fakes.hpp"

using runhooks::LoggingTensorHook;
using runhooks::ManualClock;

namespace {

// TensorFlow's t = constant(42.0, name='foo'), and what the train op does not care about.
struct Foo : runhooks::Key<float> {
  static constexpr std::string_view name = "foo";
};
struct Step : runhooks::Key<std::int64_t> {
  static constexpr std::string_view name = "step";
};
struct Ok : runhooks::Key<bool> {};

// Counts how often the session asked it for each value.
struct CountingBackend {
  std::int64_t step = 0;
  int foo_fetches = 0;
  int step_fetches = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Foo) {
    ++foo_fetches;
    return 42.0f;
  }
  std::int64_t fetch(Step) {
    ++step_fetches;
    return step;
  }
  bool fetch(Ok) const { return true; }
};

// Arrays, as TensorFlow fetches tensors of rank 1.
struct Weights : runhooks::Key<std::vector<double>> {
  static constexpr std::string_view name = "weights";
};
struct Grads : runhooks::Key<std::array<float, 3>> {
  static constexpr std::string_view name = "grads";
};
struct Labels : runhooks::Key<std::vector<std::int64_t>> {
  static constexpr std::string_view name = "labels";
};
struct Mask : runhooks::Key<std::vector<bool>> {
  static constexpr std::string_view name = "mask";
};
struct ArrayBackend : CountingBackend {
  using CountingBackend::fetch;
  std::vector<double> fetch(Weights) const { return {0.5, 1.25, 2.0}; }
  std::array<float, 3> fetch(Grads) const { return {0.1f, 0.2f, 0.3f}; }
  std::vector<std::int64_t> fetch(Labels) const { return {3, -12, 7}; }
  std::vector<bool> fetch(Mask) const { return {true, false, true}; }
};

// The log lines since the last call.
std::vector<std::string> take_lines() {
  std::vector<std::string> lines = fakes::LogCapture::lines();
  fakes::LogCapture::lines().clear();
  return lines;
}
bool logged_foo(const std::vector<std::string>& lines) {
  for (const auto& line : lines)
    if (line.find("foo") != std::string::npos) return true;
  return false;
}

// TensorFlow's _validate_print_every_n_steps: one run logs, then three times nine silent runs
// and one that logs, then one more silent run; end() logs only with at_end.
void validate_print_every_n_steps(bool at_end) {
  fakes::LogCapture capture;
  LoggingTensorHook hook{runhooks::keys<Foo>, {.every_n_iter = 10, .at_end = at_end}};
  runhooks::SingularMonitoredSession session{CountingBackend{}, std::ref(hook)};
  session.run();
  CHECK(logged_foo(take_lines()));
  for (int cycle = 0; cycle < 3; ++cycle) {
    for (int i = 0; i < 9; ++i) {
      session.run();
      CHECK_FALSE(logged_foo(take_lines()));
    }
    session.run();
    CHECK(logged_foo(take_lines()));
  }
  session.run();  // iteration 31
  CHECK_FALSE(logged_foo(take_lines()));
  session.close();
  CHECK(logged_foo(take_lines()) == at_end);
}

void validate_print_every_n_secs(bool at_end) {
  fakes::LogCapture capture;
  ManualClock clock(1484695987.209386);  // TensorFlow's MOCK_START_TIME
  LoggingTensorHook hook{runhooks::keys<Foo>, {.every_n_secs = 1.0, .at_end = at_end}, clock};
  runhooks::SingularMonitoredSession session{CountingBackend{}, std::ref(hook)};
  session.run();
  CHECK(logged_foo(take_lines()));
  session.run();
  CHECK_FALSE(logged_foo(take_lines()));
  clock.advance(1.0);
  session.run();
  CHECK(logged_foo(take_lines()));
  session.close();
  CHECK(logged_foo(take_lines()) == at_end);
}

}  // namespace

TEST_CASE("J88 test_illegal_args") {
  using O = runhooks::LoggingTensorOptions;
  CHECK_THROWS_WITH_AS((O{.every_n_iter = 0}.validate()), "invalid every_n_iter=0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.every_n_iter = -10}.validate()), "invalid every_n_iter=-10.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      (LoggingTensorHook{runhooks::keys<Foo>, {.every_n_iter = 5, .every_n_secs = 5}}),
      "either at_end and/or exactly one of every_n_iter and every_n_secs must be provided.",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS((LoggingTensorHook{runhooks::keys<Foo>, {}}),
                       doctest::Contains("exactly one of"), std::invalid_argument);
  // Beyond TensorFlow: every_n_secs must be a positive, finite duration.
  for (const double secs : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                            std::numeric_limits<double>::infinity()}) {
    INFO(secs);
    CHECK_THROWS_WITH_AS((O{.every_n_secs = secs}.validate()),
                         doctest::Contains("LoggingTensorOptions::every_n_secs"),
                         std::invalid_argument);
  }
  CHECK_NOTHROW(O{.at_end = true}.validate());
  CHECK_NOTHROW((O{.every_n_iter = 1, .at_end = true}.validate()));
}

TEST_CASE("J88 test_print_at_end_only") {
  fakes::LogCapture capture;
  LoggingTensorHook hook{runhooks::keys<Foo>, {.at_end = true}};
  runhooks::SingularMonitoredSession session{CountingBackend{}, std::ref(hook)};
  for (int i = 0; i < 3; ++i) {
    session.run();
    CHECK_FALSE(logged_foo(take_lines()));
  }
  CHECK(session.raw_session().foo_fetches == 0);  // never fetched during the runs
  session.close();
  CHECK(take_lines() == std::vector<std::string>{"foo = 42.0"});  // no "(sec)": never triggered
  CHECK(session.raw_session().foo_fetches == 1);
}

TEST_CASE("J88 test_print_every_n_steps (twice: a fresh hook starts over)") {
  validate_print_every_n_steps(false);
  validate_print_every_n_steps(false);
}

TEST_CASE("J88 test_print_every_n_steps_and_end") {
  validate_print_every_n_steps(true);
  validate_print_every_n_steps(true);
}

TEST_CASE("J88 test_print_first_step: the first log has no elapsed time") {
  fakes::LogCapture capture;
  runhooks::SingularMonitoredSession session{
      CountingBackend{}, LoggingTensorHook{runhooks::keys<Foo>, {.every_n_iter = 1}}};
  session.run();
  const auto lines = take_lines();
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "foo = 42.0");
  CHECK(lines[0].find("sec") == std::string::npos);
  session.run();
  const auto second = take_lines();
  REQUIRE(second.size() == 1);
  CHECK(second[0].rfind("foo = 42.0 (", 0) == 0);
  CHECK(second[0].find(" sec)") != std::string::npos);
}

TEST_CASE("J88 test_print_every_n_secs (twice)") {
  validate_print_every_n_secs(false);
  validate_print_every_n_secs(false);
}

TEST_CASE("J88 test_print_every_n_secs_and_end") {
  validate_print_every_n_secs(true);
  validate_print_every_n_secs(true);
}

TEST_CASE("J88 test_print_formatter: 'qqq=42.0'") {
  fakes::LogCapture capture;
  runhooks::SingularMonitoredSession session{
      CountingBackend{},
      LoggingTensorHook{runhooks::keys<Foo>, {.every_n_iter = 10}, [](const auto& values) {
                          return "qqq=" + runhooks::format_value(values[Foo{}]);
                        }}};
  session.run();
  CHECK(take_lines() == std::vector<std::string>{"qqq=42.0"});
}

TEST_CASE("LoggingTensorHook: the keys are fetched only on the runs that log") {
  fakes::LogCapture capture;
  runhooks::SingularMonitoredSession session{
      CountingBackend{},
      LoggingTensorHook{runhooks::keys<Foo, Step>, {.every_n_iter = 10, .at_end = true}}};
  for (int i = 0; i < 31; ++i) session.run();
  // Iterations 0, 10, 20 and 30 log: four fetches of each key, not 31.
  CHECK(session.raw_session().foo_fetches == 4);
  CHECK(session.raw_session().step_fetches == 4);
  session.close();  // at_end reads the backend once more
  CHECK(session.raw_session().foo_fetches == 5);
  const auto lines = take_lines();
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "foo = 42.0, step = 1");
  CHECK(lines[1].rfind("foo = 42.0, step = 11 (", 0) == 0);
  CHECK(lines[3].rfind("foo = 42.0, step = 31 (", 0) == 0);
  CHECK(lines[4].rfind("foo = 42.0, step = 31 (", 0) == 0);
}

TEST_CASE("LoggingTensorHook: a run that fails is not an iteration") {
  fakes::LogCapture capture;
  struct Failing : CountingBackend {
    int calls = 0;
    void run() {
      if (++calls == 3) throw std::runtime_error("step failed");
      CountingBackend::run();
    }
  };
  LoggingTensorHook hook{runhooks::keys<Foo>, {.every_n_iter = 2}};
  runhooks::SingularMonitoredSession session{Failing{}, std::ref(hook)};
  session.run();                                     // iteration 0 logs
  session.run();                                     // 1
  CHECK_THROWS_AS(session.run(), std::runtime_error);  // iteration 2 fetched nothing
  CHECK(hook.iterations() == 2);
  take_lines();
  session.run();  // iteration 2 again: logs
  CHECK(logged_foo(take_lines()));
}

TEST_CASE("LoggingTensorHook: values print as numpy prints scalars") {
  struct Values : CountingBackend {
    using CountingBackend::fetch;
    bool fetch(Ok) const { return false; }
  };
  struct Tiny : runhooks::Key<double> {};
  struct Big : runhooks::Key<float> {};
  struct Text : runhooks::Key<std::string> {};
  struct Backend : Values {
    using Values::fetch;
    double fetch(Tiny) const { return 1e-5; }
    float fetch(Big) const { return 1e6f; }
    std::string fetch(Text) const { return "ok"; }
  };
  fakes::LogCapture capture;
  runhooks::SingularMonitoredSession session{
      Backend{}, LoggingTensorHook{runhooks::keys<Ok, Tiny, Big, Text>, {.every_n_iter = 1}}};
  session.run();
  CHECK(take_lines() == std::vector<std::string>{"Ok = False, Tiny = 1e-05, Big = 1e+06, Text = ok"});
  CHECK(runhooks::format_value(0.1f) == "0.1");
  CHECK(runhooks::format_value(123456.0f) == "123456.0");
  CHECK(runhooks::format_value(1e-4f) == "1e-04");  // the float nearest 1e-4 is below it
  CHECK(runhooks::format_value(1e-4) == "0.0001");
  CHECK(runhooks::format_value(1e15) == "1000000000000000.0");
  CHECK(runhooks::format_value(1e16) == "1e+16");
  CHECK(runhooks::format_value(-0.0) == "-0.0");
  CHECK(runhooks::format_value(std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(runhooks::format_value(-std::numeric_limits<float>::infinity()) == "-inf");
  CHECK(runhooks::format_value(std::int64_t{-7}) == "-7");
}

// Every literal below is numpy's own output (numpy 2.4.6), made by
//   python3 -c "import numpy as np; print(repr(str(np.array([0.5, 1.25, 2.0]))))"
// with the array of each line; float32 arrays with dtype=np.float32, bools with dtype=bool.
TEST_CASE("LoggingTensorHook: 1-D arrays print as numpy's str() prints them") {
  fakes::LogCapture capture;
  runhooks::SingularMonitoredSession session{
      ArrayBackend{},
      LoggingTensorHook{runhooks::keys<Weights, Grads, Labels, Mask, Step>, {.every_n_iter = 1}}};
  session.run();
  // TensorFlow's "%s = %s" % (tag, value) of each fetched numpy array.
  CHECK(take_lines() ==
        std::vector<std::string>{"weights = [0.5  1.25 2.  ], grads = [0.1 0.2 0.3], "
                                 "labels = [  3 -12   7], mask = [ True False  True], step = 1"});

  using V = std::vector<double>;
  using F = std::vector<float>;
  using I = std::vector<std::int64_t>;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // Positional: decimal points aligned, trailing '.', at most 8 fractional digits.
  CHECK(runhooks::format_value(V{1.0, 2.5, 3.0}) == "[1.  2.5 3. ]");
  CHECK(runhooks::format_value(V{1.0, 2.0, 3.0}) == "[1. 2. 3.]");
  CHECK(runhooks::format_value(V{0.1 + 0.2, 1.0 / 3}) == "[0.3        0.33333333]");
  CHECK(runhooks::format_value(V{1.23456789012, -7.5}) == "[ 1.23456789 -7.5       ]");
  CHECK(runhooks::format_value(V{0.001953125, 1.0}) == "[0.00195312 1.        ]");  // half-even
  CHECK(runhooks::format_value(V{0.0, -0.0}) == "[ 0. -0.]");
  CHECK(runhooks::format_value(F{1e-4f}) == "[0.0001]");  // float32 compared in float32
  // Scientific: a magnitude below 1e-4, from 1e8 (float32: 1e6), or a ratio above 1000.
  CHECK(runhooks::format_value(V{1e-5, 1.0}) == "[1.e-05 1.e+00]");
  CHECK(runhooks::format_value(V{1.5e-5, 1.0, -2.0}) == "[ 1.5e-05  1.0e+00 -2.0e+00]");
  CHECK(runhooks::format_value(V{1e-100, 1.0}) == "[1.e-100 1.e+000]");
  CHECK(runhooks::format_value(V{123456789.0, 1.0}) == "[1.23456789e+08 1.00000000e+00]");
  CHECK(runhooks::format_value(V{1001.0, 1.0}) == "[1.001e+03 1.000e+00]");
  CHECK(runhooks::format_value(V{-1e-5, 12345.678}) == "[-1.0000000e-05  1.2345678e+04]");
  CHECK(runhooks::format_value(F{1e6f, 1.0f}) == "[1.e+06 1.e+00]");
  CHECK(runhooks::format_value(F{1e-4f, 1.0f}) == "[1.e-04 1.e+00]");
  // A float32's mantissas padded with its exact digits, not zeros.
  CHECK(runhooks::format_value(F{0.9543289f, 12.345678f, 1e-5f}) ==
        "[9.5432889e-01 1.2345678e+01 9.9999997e-06]");
  // nan and inf, right-aligned.
  CHECK(runhooks::format_value(V{nan, inf, -inf, 1.5}) == "[ nan  inf -inf  1.5]");
  CHECK(runhooks::format_value(V{nan, -inf}) == "[ nan -inf]");
  CHECK(runhooks::format_value(V{nan}) == "[nan]");
  // Integers right-aligned; empty.
  CHECK(runhooks::format_value(I{-1, 10, 100}) == "[ -1  10 100]");
  CHECK(runhooks::format_value(std::vector<std::uint8_t>{0, 255}) == "[  0 255]");
  CHECK(runhooks::format_value(V{}) == "[]");
  const float raw[] = {1.0f, 2.0f};
  CHECK(runhooks::format_value(std::span<const float>(raw)) == "[1. 2.]");
  // Lines wrap before column 75, continuation indented by one space: np.arange(40).
  I forty(40);
  for (std::size_t i = 0; i < forty.size(); ++i) forty[i] = static_cast<std::int64_t>(i);
  CHECK(runhooks::format_value(forty) ==
        "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n"
        " 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39]");
  // Above 1000 elements, the first and last three (which alone decide the format) and "...":
  // np.arange(1001), np.arange(2000) * 0.5, np.linspace(0, 1, 2000).
  I many(1001);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(i);
  CHECK(runhooks::format_value(many) == "[   0    1    2 ...  998  999 1000]");
  V halves(2000), spaced(2000);
  for (std::size_t i = 0; i < 2000; ++i) {
    halves[i] = static_cast<double>(i) * 0.5;
    spaced[i] = static_cast<double>(i) / 1999.0;
  }
  CHECK(runhooks::format_value(halves) ==
        "[0.000e+00 5.000e-01 1.000e+00 ... 9.985e+02 9.990e+02 9.995e+02]");
  CHECK(runhooks::format_value(spaced) ==
        "[0.00000000e+00 5.00250125e-04 1.00050025e-03 ... 9.98999500e-01\n"
        " 9.99499750e-01 1.00000000e+00]");
}

TEST_CASE("LoggingTensorHook every_n_secs: the clock is sampled, not read every step") {
  fakes::LogCapture capture;
  ManualClock clock(100.0);
  LoggingTensorHook hook{runhooks::keys<Foo>, {.every_n_secs = 0.1}, clock};
  runhooks::SingularMonitoredSession session{CountingBackend{}, std::ref(hook)};
  // 100000 runs of 10 us each: one second, ten periods.
  for (int i = 0; i < 100000; ++i) {
    session.run();
    clock.advance(1e-5);
  }
  const auto lines = take_lines();
  CHECK(lines.size() >= 10);
  CHECK(lines.size() <= 11);
  // About 64 samples per period, far below one per run.
  CHECK(hook.clock_samples() < 2000);
  CHECK(session.raw_session().foo_fetches == static_cast<int>(lines.size()));
}
