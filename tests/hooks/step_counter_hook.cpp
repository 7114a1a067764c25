// StepCounterHook: TensorFlow's StepCounterHookTest (cases C12-C19 of tf-semantics.md §3) with
// its summary steps, the log line and warning, the output policies, and the clock-read bound of
// every_n_secs mode.

#include <runhooks/clock.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/hooks/learning_rate_monitor_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/throughput_monitor_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/csv_output.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/event_reader.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

// The hooks whose output has no default (SummaryOutput) are not default-constructible, and asking
// is not an error: with clang++ 14 a default argument `Output output = {}` made the question a
// hard error, so such a hook could not sit in std::optional or runhooks::Conditional.
static_assert(!std::is_default_constructible_v<
              runhooks::StepCounterHook<runhooks::SteadyClock, runhooks::SummaryOutput>>);
static_assert(!std::is_default_constructible_v<
              runhooks::ThroughputMonitorHook<runhooks::ThroughputKeys<>, runhooks::SummaryOutput>>);
static_assert(!std::is_default_constructible_v<
              runhooks::LearningRateMonitorHook<runhooks::SummaryOutput>>);
static_assert(std::is_default_constructible_v<runhooks::StepCounterHook<>> &&
              std::is_default_constructible_v<runhooks::ThroughputMonitorHook<>> &&
              std::is_default_constructible_v<runhooks::LearningRateMonitorHook<>>);

namespace fs = std::filesystem;
using runhooks::ManualClock;
using runhooks::Severity;
using runhooks::StepCounterHook;
using runhooks::StepCounterOptions;

namespace {

// Captures runhooks' log lines for the life of the object.
struct LogLine {
  Severity severity;
  std::string text;
};
std::vector<LogLine>& captured_lines() {
  static std::vector<LogLine> lines;
  return lines;
}
class LogCapture {
 public:
  LogCapture()
      : previous_(runhooks::set_log_sink([](Severity severity, std::string_view line) {
          captured_lines().push_back({severity, std::string(line)});
        })) {
    captured_lines().clear();
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() { runhooks::set_log_sink(previous_); }

  std::vector<std::string> lines(Severity severity) const {
    std::vector<std::string> out;
    for (const LogLine& line : captured_lines())
      if (line.severity == severity) out.push_back(line.text);
    return out;
  }

 private:
  runhooks::LogSink previous_;
};

// The fake backend of TensorFlow's tests: each run moves the (mocked) clock, then adds
// `increment` to the global step (TensorFlow's `_increment_global_step(k)` train op).
struct CounterBackend {
  ManualClock clock;
  std::int64_t increment = 1;
  double secs_per_run = 0.0;
  std::int64_t step = 0;

  void run() {
    clock.advance(secs_per_run);
    step += increment;
  }
  std::int64_t global_step() const { return step; }
};

// One recorded summary, with the clock's time when it was recorded.
struct Summary {
  std::string tag;
  double steps_per_sec;
  std::int64_t step;
  double time;
};

// An output policy that records into `out` (TensorFlow's tests use a FakeSummaryWriter).
auto recorder(std::vector<Summary>& out, ManualClock clock) {
  return runhooks::CallbackOutput{
      [&out, clock](std::string_view tag, double steps_per_sec, std::int64_t step) {
        out.push_back({std::string(tag), steps_per_sec, step, clock.now()});
      }};
}

std::vector<std::int64_t> steps_of(const std::vector<Summary>& summaries) {
  std::vector<std::int64_t> steps;
  for (const Summary& s : summaries) steps.push_back(s.step);
  return steps;
}

// Runs `runs` steps of `backend` under a StepCounterHook recording into a vector.
std::vector<Summary> run_counter(StepCounterOptions options, CounterBackend backend, int runs) {
  std::vector<Summary> summaries;
  ManualClock clock = backend.clock;
  runhooks::MonitoredSession session(std::move(backend),
                                     StepCounterHook(std::move(options), clock,
                                                     recorder(summaries, clock)));
  for (int i = 0; i < runs; ++i) session.run();
  session.close();
  return summaries;
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::random_device entropy;
    path_ = fs::temp_directory_path() / ("runhooks-step-counter-" + std::to_string(entropy()));
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

constexpr double mock_start_time = 1484695987.209386;

}  // namespace

TEST_CASE("C12 test_step_counter_every_n_steps") {
  const LogCapture log;
  ManualClock clock(mock_start_time);
  const auto summaries =
      run_counter({.every_n_steps = 10}, {.clock = clock, .secs_per_run = 0.01}, 30);

  CHECK(steps_of(summaries) == std::vector<std::int64_t>{11, 21});
  for (const Summary& s : summaries) {
    CHECK(s.tag == "global_step/sec");
    CHECK(s.steps_per_sec > 0.0);
    // 10 steps in 10 runs of 0.01 s.
    CHECK(s.steps_per_sec == doctest::Approx(10 / (10 * 0.01)));
  }
  CHECK(log.lines(Severity::warning).empty());
}

TEST_CASE("C12 the rate is the steps over the seconds between two triggers") {
  // Uneven runs: 0.01 s each, except a 1.0 s pause after step 5.
  std::vector<Summary> summaries;
  ManualClock clock;
  runhooks::MonitoredSession session(
      CounterBackend{.clock = clock, .secs_per_run = 0.01},
      StepCounterHook({.every_n_steps = 10}, clock, recorder(summaries, clock)));
  for (int i = 0; i < 21; ++i) {
    session.run();
    if (session.raw_session().step == 5) clock.advance(1.0);
  }
  session.close();
  // Triggers at 1 (t = 0.01), 11 (t = 0.11 + 1.0), 21 (t = 1.21).
  REQUIRE(steps_of(summaries) == std::vector<std::int64_t>{11, 21});
  CHECK(summaries[0].steps_per_sec == doctest::Approx((11 - 1) / (1.11 - 0.01)));
  CHECK(summaries[1].steps_per_sec == doctest::Approx((21 - 11) / (1.21 - 1.11)));
}

TEST_CASE("C12 the log line is TensorFlow's `global_step/sec: %g`") {
  const LogCapture log;
  // From 0, not from TensorFlow's start time: near 1.5e9 s a double keeps only about 7 digits
  // of a 0.1 s interval, and %g prints 6.
  ManualClock clock;
  runhooks::MonitoredSession session(CounterBackend{.clock = clock, .secs_per_run = 0.0123},
                                     StepCounterHook({.every_n_steps = 10}, clock));
  for (int i = 0; i < 30; ++i) session.run();
  session.close();
  // 10 / (10 * 0.0123) = 81.30081...
  CHECK(log.lines(Severity::info) ==
        std::vector<std::string>{"global_step/sec: 81.3008", "global_step/sec: 81.3008"});
}

TEST_CASE("C12 LogOutput formats as %g") {
  const LogCapture log;
  runhooks::LogOutput{}.record("global_step/sec", 10 / 0.280314, 11);
  runhooks::LogOutput{}.record("bar/foo/sec", 100.0, 2);
  runhooks::LogOutput{}.record("global_step/sec", 1.6e-7, 3);
  CHECK(log.lines(Severity::info) == std::vector<std::string>{"global_step/sec: 35.6743",
                                                               "bar/foo/sec: 100",
                                                               "global_step/sec: 1.6e-07"});
}

TEST_CASE("C13 test_step_counter_every_n_secs") {
  std::vector<Summary> summaries;
  ManualClock clock(mock_start_time);
  runhooks::MonitoredSession session(
      CounterBackend{.clock = clock},
      StepCounterHook({.every_n_secs = 0.1}, clock, recorder(summaries, clock)));
  session.run();
  clock.advance(0.2);
  session.run();
  clock.advance(0.2);
  session.run();
  session.close();

  CHECK(steps_of(summaries) == std::vector<std::int64_t>{2, 3});
  for (const Summary& s : summaries) {
    CHECK(s.tag == "global_step/sec");
    CHECK(s.steps_per_sec > 0.0);
    CHECK(s.steps_per_sec == doctest::Approx(1 / 0.2));
  }
}

TEST_CASE("C13 every_n_secs alone is enough (TensorFlow also needs every_n_steps=None)") {
  StepCounterHook<ManualClock> hook({.every_n_secs = 0.5});
  CHECK(hook.options().every_n_secs == 0.5);
  CHECK(!hook.options().every_n_steps.has_value());
}

TEST_CASE("C14 test_global_step_name") {
  ManualClock clock;
  const auto summaries = run_counter({.every_n_steps = 1, .tag = "bar/foo/sec"},
                                     {.clock = clock, .secs_per_run = 0.01}, 2);
  REQUIRE(steps_of(summaries) == std::vector<std::int64_t>{2});
  CHECK(summaries[0].tag == "bar/foo/sec");
  CHECK(summaries[0].steps_per_sec == doctest::Approx(1 / 0.01));
}

TEST_CASE("C15 test_log_warning_if_global_step_not_increased") {
  const LogCapture log;
  ManualClock clock;
  const auto summaries =
      run_counter({.every_n_steps = 1}, {.clock = clock, .increment = 0, .secs_per_run = 0.01},
                  1 + 30);
  CHECK(summaries.empty());

  const auto warnings = log.lines(Severity::warning);
  // 30 chances, at most 5 warnings (TensorFlow's log_first_n(WARN, ..., 5)).
  CHECK(warnings.size() == 5);
  const std::regex pattern("global step.*has not been increased");
  for (const std::string& warning : warnings) {
    CHECK(std::regex_search(warning, pattern));
    CHECK(warning.find("Current value (could be stable): 0 vs previous value: 0") !=
          std::string::npos);
  }
}

TEST_CASE("C15 no warning after the first run, nor while the step increases") {
  const LogCapture log;
  ManualClock clock;
  {
    runhooks::MonitoredSession session(CounterBackend{.clock = clock, .increment = 0},
                                       StepCounterHook({.every_n_steps = 1}, clock));
    session.run();
    CHECK(log.lines(Severity::warning).empty());
    session.run();
    CHECK(log.lines(Severity::warning).size() == 1);
    session.raw_session().increment = 1;
    for (int i = 0; i < 10; ++i) session.run();
    CHECK(log.lines(Severity::warning).size() == 1);
    session.close();
  }
}

// TensorFlow's steps_per_run only shifts the hook's cheap pre-check on the stale step; runhooks
// reads the global step after the run, so it needs no such option and must give the same steps.
TEST_CASE("C16 test_steps_per_run_less_than_every_n_steps") {
  ManualClock clock;
  const auto summaries = run_counter({.every_n_steps = 10},
                                     {.clock = clock, .increment = 5, .secs_per_run = 0.01}, 5);
  CHECK(steps_of(summaries) == std::vector<std::int64_t>{15, 25});
  for (const Summary& s : summaries) CHECK(s.steps_per_sec == doctest::Approx(10 / 0.02));
}

TEST_CASE("C17 test_steps_per_run_equal_every_n_steps") {
  ManualClock clock;
  const auto summaries = run_counter({.every_n_steps = 5},
                                     {.clock = clock, .increment = 5, .secs_per_run = 0.01}, 5);
  CHECK(steps_of(summaries) == std::vector<std::int64_t>{10, 15, 20, 25});
  for (const Summary& s : summaries) CHECK(s.steps_per_sec == doctest::Approx(5 / 0.01));
}

TEST_CASE("C18 test_steps_per_run_greater_than_every_n_steps") {
  ManualClock clock;
  const auto summaries = run_counter({.every_n_steps = 5},
                                     {.clock = clock, .increment = 10, .secs_per_run = 0.01}, 5);
  CHECK(steps_of(summaries) == std::vector<std::int64_t>{20, 30, 40, 50});
  for (const Summary& s : summaries) CHECK(s.steps_per_sec == doctest::Approx(10 / 0.01));
}

TEST_CASE("C19 test_summary_writer: SummaryOutput (TF's output_dir) writes an event file with the two summaries") {
  const LogCapture log;
  const TempDir dir;
  const fs::path logdir = dir.path() / "logs";
  ManualClock clock;
  {
    runhooks::MonitoredSession session(
        CounterBackend{.clock = clock, .secs_per_run = 0.01},
        StepCounterHook({.every_n_steps = 10}, runhooks::SummaryOutput(logdir), clock));
    for (int i = 0; i < 30; ++i) session.run();
    session.close();
  }
  // SummaryOutput logs as well, as TensorFlow's hook with an output_dir does.
  CHECK(log.lines(Severity::info) ==
        std::vector<std::string>{"global_step/sec: 100", "global_step/sec: 100"});

  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(logdir))
    if (entry.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(entry);
  REQUIRE(files.size() == 1);

  // TensorFlow's two summary events, after the SessionLog START runhooks writes at the first step
  // (TensorFlow's StepCounterHook writes none: a restart would leave its old points in view).
  const std::vector<runhooks::Event> events = runhooks::read_event_file(files[0]);
  REQUIRE(events.size() == 4);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].summary.empty());
  CHECK(events[1].step == 1);
  CHECK(events[1].session_log == runhooks::SessionLog{runhooks::SessionLog::Status::start, "", ""});
  std::vector<std::int64_t> steps;
  for (std::size_t i = 2; i < events.size(); ++i) {
    steps.push_back(events[i].step);
    REQUIRE(events[i].summary.size() == 1);
    CHECK(events[i].summary[0].tag == "global_step/sec");
    REQUIRE(events[i].summary[0].simple_value.has_value());
    CHECK(*events[i].summary[0].simple_value > 0.0f);
    CHECK(*events[i].summary[0].simple_value == doctest::Approx(100.0));
  }
  CHECK(steps == std::vector<std::int64_t>{11, 21});
}

TEST_CASE("C19 the default output (LogOutput) writes no file") {
  const LogCapture log;
  const TempDir dir;
  ManualClock clock;
  StepCounterHook<ManualClock> hook({.every_n_steps = 1}, clock);
  static_assert(std::is_same_v<decltype(hook.output()), runhooks::LogOutput&>);
  runhooks::MonitoredSession session(CounterBackend{.clock = clock, .secs_per_run = 1.0},
                                     std::ref(hook));
  session.run();
  session.run();
  session.close();
  CHECK(log.lines(Severity::info) == std::vector<std::string>{"global_step/sec: 1"});
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("CsvOutput writes a header and one row per summary") {
  const TempDir dir;
  const fs::path csv = dir.path() / "rate.csv";
  ManualClock clock;
  {
    runhooks::MonitoredSession session(
        CounterBackend{.clock = clock, .secs_per_run = 0.01},
        StepCounterHook({.every_n_steps = 10}, clock, runhooks::CsvOutput(csv)));
    for (int i = 0; i < 30; ++i) session.run();
    session.close();
  }
  std::ifstream in(csv);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() ==
        "global_step,tag,steps_per_sec\n11,global_step/sec,100\n21,global_step/sec,100\n");

  // A second writer appends rows without a second header.
  {
    runhooks::CsvOutput again(csv);
    again.record("global_step/sec", 2.5, 31);
  }
  std::ifstream in2(csv);
  std::stringstream text2;
  text2 << in2.rdbuf();
  CHECK(text2.str() == "global_step,tag,steps_per_sec\n11,global_step/sec,100\n"
                       "21,global_step/sec,100\n31,global_step/sec,2.5\n");
}

TEST_CASE("CsvOutput and SummaryOutput: path(), output_dir() and log_line() are the settings as given") {
  const TempDir dir;
  const runhooks::CsvOutput csv(dir.path() / "rate.csv");
  CHECK(csv.path() == dir.path() / "rate.csv");
  const runhooks::CsvOutput copy = csv;  // copies share the file
  CHECK(copy.path() == dir.path() / "rate.csv");
  const runhooks::SummaryOutput summaries(dir.path() / "logs", /*log_line=*/false);
  CHECK(summaries.output_dir() == dir.path() / "logs");
  CHECK(!summaries.log_line());
  // Reached through the hook, as a session's hook<I>().output().
  StepCounterHook hook({.every_n_steps = 10}, runhooks::SummaryOutput(dir.path() / "logs"));
  CHECK(hook.output().output_dir() == dir.path() / "logs");
  CHECK(hook.output().log_line());
  // No file before the hook begins (TensorFlow's hook takes its writer in begin()): a hook that
  // never begins, as ChiefOnly's on a job's other ranks, writes nothing into the directory.
  CHECK_FALSE(std::filesystem::exists(dir.path() / "logs"));
}

TEST_CASE("CsvOutput reports a file it cannot open") {
  const TempDir dir;
  CHECK_THROWS_AS(runhooks::CsvOutput(dir.path() / "missing" / "rate.csv"), std::system_error);
}

TEST_CASE("StepCounterHook: exactly one of every_n_steps and every_n_secs") {
  CHECK_THROWS_WITH_AS(StepCounterHook<ManualClock>({.every_n_steps = 100, .every_n_secs = 0.1}),
                       "exactly one of every_n_steps and every_n_secs should be provided.",
                       std::invalid_argument);
  // Neither: TensorFlow's default, every 100 steps.
  StepCounterHook<ManualClock> hook;
  CHECK(hook.options().every_n_steps == 100);
  CHECK(!hook.options().every_n_secs.has_value());
  CHECK(hook.options().tag == "global_step/sec");
}

TEST_CASE("StepCounterHook rejects periods TensorFlow would accept but never uses sensibly") {
  CHECK_THROWS_AS(StepCounterHook<ManualClock>({.every_n_steps = 0}), std::invalid_argument);
  CHECK_THROWS_AS(StepCounterHook<ManualClock>({.every_n_secs = 0.0}), std::invalid_argument);
  CHECK_THROWS_AS(StepCounterHook<ManualClock>({.every_n_secs = -1.0}), std::invalid_argument);
}

namespace {

// A ManualClock that counts how often it is read.
struct CountingClock {
  ManualClock clock;
  std::shared_ptr<std::int64_t> reads = std::make_shared<std::int64_t>(0);

  double now() {
    ++*reads;
    return clock.now();
  }
  void sleep_for(double seconds, std::stop_token stop = {}) { clock.sleep_for(seconds, stop); }
};

}  // namespace

TEST_CASE("every_n_secs reads the clock rarely and fires at most 2% of a period late") {
  constexpr int steps = 1'000'000;
  constexpr double secs_per_step = 1e-6;
  constexpr double period = 0.1;

  std::vector<Summary> summaries;
  ManualClock clock;
  CountingClock counting{clock};
  runhooks::MonitoredSession session(
      CounterBackend{.clock = clock, .secs_per_run = secs_per_step},
      StepCounterHook({.every_n_secs = period}, counting, recorder(summaries, clock)));
  for (int i = 0; i < steps; ++i) session.run();
  session.close();

  INFO("clock_reads() = ", session.hook<0>().clock_reads(), ", actual reads = ", *counting.reads);
  CHECK(session.hook<0>().clock_reads() < steps / 100);
  CHECK(*counting.reads < steps / 100);
  CHECK(*counting.reads <= 3 * session.hook<0>().clock_reads());

  // 1 s of steps: about 9 periods after the first (silent) trigger at step 1.
  REQUIRE(summaries.size() >= 9);
  double previous_time = secs_per_step;  // the first trigger: step 1
  std::int64_t previous_step = 1;
  for (const Summary& s : summaries) {
    const double gap = s.time - previous_time;
    CAPTURE(s.step);
    CHECK(gap >= period - 1e-9);          // never early
    CHECK(gap <= period * 1.02);          // at most 2% of the period late
    CHECK(s.steps_per_sec ==
          doctest::Approx(static_cast<double>(s.step - previous_step) / gap).epsilon(1e-9));
    CHECK(s.steps_per_sec == doctest::Approx(1 / secs_per_step));
    previous_time = s.time;
    previous_step = s.step;
  }
}

TEST_CASE("every_n_steps reads the clock only when it triggers") {
  ManualClock clock;
  CountingClock counting{clock};
  std::vector<Summary> summaries;
  runhooks::MonitoredSession session(
      CounterBackend{.clock = clock, .secs_per_run = 0.01},
      StepCounterHook({.every_n_steps = 100}, counting, recorder(summaries, clock)));
  for (int i = 0; i < 1000; ++i) session.run();
  session.close();
  CHECK(steps_of(summaries).size() == 9);
  CHECK(*counting.reads == 10);  // triggers at 1, 101, ..., 901
}

// --- issue 9: limits and a global step that goes back ---------------------------------------

TEST_CASE("defect 4: every_n_steps = INT64_MAX reports never, not every step") {
  ManualClock clock;
  const auto summaries =
      run_counter({.every_n_steps = std::numeric_limits<std::int64_t>::max()},
                  {.clock = clock, .secs_per_run = 0.01}, 50);
  CHECK(summaries.empty());
}

TEST_CASE("defect 4: a global step near INT64_MAX reports every n steps, not every step") {
  ManualClock clock;
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const auto summaries =
      run_counter({.every_n_steps = 10},
                  {.clock = clock, .secs_per_run = 0.01, .step = max - 45}, 45);
  // First trigger at max - 44 (records nothing), then every 10: max - 34, -24, -14, -4; the
  // next threshold, max - 4 + 10, saturates at max, which is the last step and reports (4 steps).
  CHECK(steps_of(summaries) ==
        std::vector<std::int64_t>{max - 34, max - 24, max - 14, max - 4, max});
  for (const Summary& s : summaries) CHECK(s.steps_per_sec == doctest::Approx(100.0));
}

TEST_CASE("defect 4: every_n_secs at a global step near INT64_MAX keeps sampling without overflow") {
  ManualClock clock;
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const auto summaries = run_counter({.every_n_secs = 0.1},
                                     {.clock = clock, .secs_per_run = 0.01, .step = max - 100}, 100);
  REQUIRE(summaries.size() >= 8);
  for (const Summary& s : summaries) CHECK(s.steps_per_sec == doctest::Approx(100.0));
}

// A backend whose global step goes back once, as a recovery that restores an older state does.
struct GoesBackBackend {
  ManualClock clock;
  double secs_per_run = 0.1;
  std::int64_t back_at_run = 0;  // the run after which the step drops
  std::int64_t back_to = 0;
  std::int64_t step = 0;
  std::int64_t runs = 0;
  void run() {
    clock.advance(secs_per_run);
    ++runs;
    step = runs == back_at_run ? back_to : step + 1;
  }
  std::int64_t global_step() const { return step; }
};

TEST_CASE("defect 6: every_n_secs keeps reporting on time after the global step goes back, and says so once") {
  const LogCapture log;
  ManualClock clock;
  std::vector<Summary> summaries;
  runhooks::MonitoredSession session(
      GoesBackBackend{.clock = clock, .back_at_run = 500, .back_to = 10},
      StepCounterHook({.every_n_secs = 1.0}, clock, recorder(summaries, clock)));
  for (int i = 0; i < 1000; ++i) session.run();
  session.close();
  // 10 steps per second before and after; one report per second, never silent, never negative.
  std::vector<double> times;
  for (const Summary& s : summaries) {
    CHECK(s.steps_per_sec == doctest::Approx(10.0).epsilon(0.2));
    times.push_back(s.time);
  }
  for (std::size_t i = 1; i < times.size(); ++i) CHECK(times[i] - times[i - 1] <= 2.05);
  CHECK(summaries.size() >= 85);  // 100 s; a 0.1 s step lands each trigger 0 to 0.1 s late
  CHECK(log.lines(Severity::warning) ==
        std::vector<std::string>{"StepCounterHook: global step went back from 499 to 10 (a "
                                 "recovery restored an older state?); measuring from there."});
}

TEST_CASE("defect 6: every_n_steps re-bases on the step that went back, instead of waiting for the old one") {
  const LogCapture log;
  ManualClock clock;
  std::vector<Summary> summaries;
  runhooks::MonitoredSession session(
      GoesBackBackend{.clock = clock, .back_at_run = 55, .back_to = 5},
      StepCounterHook({.every_n_steps = 10}, clock, recorder(summaries, clock)));
  for (int i = 0; i < 80; ++i) session.run();
  session.close();
  // 1 (first), 11 ... 51; back at run 55 to 5 (re-based, records nothing); then 15, 25.
  CHECK(steps_of(summaries) == std::vector<std::int64_t>{11, 21, 31, 41, 51, 15, 25});
  for (const Summary& s : summaries) CHECK(s.steps_per_sec == doctest::Approx(10.0));
  CHECK(log.lines(Severity::warning).size() == 1);
}

TEST_CASE("defect 5/8: every_n_secs is validated: zero, negative, NaN, infinite, huge") {
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), 1e300}) {
    INFO(bad);
    CHECK_THROWS_AS(StepCounterHook<ManualClock>({.every_n_secs = bad}), std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(StepCounterHook<ManualClock>({.every_n_secs = -2.5}),
                       "runhooks: StepCounterOptions::every_n_secs must be a number of seconds "
                       "greater than 0 and at most 1e+09, got -2.5.",
                       std::invalid_argument);
}
