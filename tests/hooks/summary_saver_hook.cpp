// SummarySaverHook: TensorFlow's SummarySaverHookTest (case J90 of tf-semantics.md §3) with its
// numbers, the first-step and end rules (SessionLog START, flush), the lazy fetch, the
// histograms (TensorFlow's buckets), and the event file read back by TensorBoard's own reader
// (tools/read_summaries.py, when the tensorboard package is installed).

#include <runhooks/error.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>
#include <runhooks/summary/histogram.hpp>

#include <doctest/doctest.h>

#include <cfloat>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "support/hook_test_support.hpp"

using runhooks::ManualClock;
using runhooks::SummarySaverHook;

namespace {

// TensorFlow's var = Variable(0.0); tensor = assign_add(var, 1.0); tensor2 = tensor * 2: the
// summaries' ops run only on the steps that fetch them, once per step however many fetch them.
struct MySummary : runhooks::Key<float> {
  static constexpr std::string_view name = "my_summary";
};
struct MySummary2 : runhooks::Key<float> {
  static constexpr std::string_view name = "my_summary2";
};
struct Weights : runhooks::Key<std::vector<double>> {};

struct SummaryBackend {
  std::int64_t step = 0;
  double var = 0.0;
  std::int64_t var_step = -1;
  int evaluations = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(MySummary) { return static_cast<float>(assign_add()); }
  float fetch(MySummary2) { return static_cast<float>(2.0 * assign_add()); }
  std::vector<double> fetch(Weights) const { return {0.5, -1.0, static_cast<double>(step)}; }

  double assign_add() {
    if (var_step != step) {
      var += 1.0;
      var_step = step;
      ++evaluations;
    }
    return var;
  }
};

// TensorFlow's FakeSummaryWriter: what the hook wrote, by step.
struct CaptureWriter {
  struct State {
    std::map<std::int64_t, std::map<std::string, float>> scalars;
    std::map<std::int64_t, std::map<std::string, runhooks::Histogram>> histograms;
    std::vector<std::int64_t> session_starts;
    int flushes = 0;
  };
  std::shared_ptr<State> state = std::make_shared<State>();

  void write_summary(const std::vector<runhooks::SummaryItem>& values, std::int64_t step) {
    for (const auto& v : values) {
      if (const float* scalar = std::get_if<float>(&v.value))
        state->scalars[step][v.tag] = *scalar;
      else
        state->histograms[step].emplace(v.tag, std::get<runhooks::Histogram>(v.value));
    }
  }
  void write_session_start(std::int64_t step) { state->session_starts.push_back(step); }
  void flush() { ++state->flushes; }
};

using Scalars = std::map<std::int64_t, std::map<std::string, float>>;

// Throws AbortedError from the before_run of the given run, once.
struct LoseOnce {
  int* run;
  void before_run(auto&) {
    if (*run > 0 && --*run == 0) throw runhooks::AbortedError("backend lost");
  }
};

}  // namespace

TEST_CASE("J90 invalid constructions") {
  CaptureWriter writer;
  CHECK_THROWS_WITH_AS(
      (SummarySaverHook{{.save_steps = 20, .save_secs = 10}, writer, runhooks::scalars<MySummary>}),
      doctest::Contains("Can not provide both every_secs and every_steps"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((SummarySaverHook{{}, writer, runhooks::scalars<MySummary>}),
                       doctest::Contains("Either every_secs or every_steps should be provided"),
                       std::invalid_argument);
  // Beyond TensorFlow: no period that never or always triggers.
  CHECK_THROWS_WITH_AS((runhooks::SummarySaverOptions{.save_steps = 0}.validate()),
                       "runhooks: SummarySaverOptions::save_steps must be at least 1, got 0.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((runhooks::SummarySaverOptions{.save_secs = -1.0}.validate()),
                       doctest::Contains("SummarySaverOptions::save_secs"), std::invalid_argument);
}

TEST_CASE("J90 test_save_steps: save_steps=8, 30 runs: {1: 1.0, 9: 2.0, 17: 3.0, 25: 4.0}") {
  CaptureWriter writer;
  runhooks::SingularMonitoredSession session{
      SummaryBackend{}, SummarySaverHook{{.save_steps = 8}, writer, runhooks::scalars<MySummary>}};
  for (int i = 0; i < 30; ++i) session.run();
  const int flushes_before_end = writer.state->flushes;
  session.close();
  CHECK(writer.state->scalars == Scalars{{1, {{"my_summary", 1.0f}}},
                                         {9, {{"my_summary", 2.0f}}},
                                         {17, {{"my_summary", 3.0f}}},
                                         {25, {{"my_summary", 4.0f}}}});
  // The values count the evaluations: the summary was fetched on those 4 steps only.
  CHECK(session.raw_session().evaluations == 4);
  // First-step rule: SessionLog START at the first run's step; end rule: end() flushes.
  CHECK(writer.state->session_starts == std::vector<std::int64_t>{1});
  CHECK(writer.state->flushes == flushes_before_end + 1);
}

TEST_CASE("J90 test_multiple_summaries: 10 runs: {1: (1, 2), 9: (2, 4)}") {
  CaptureWriter writer;
  runhooks::SingularMonitoredSession session{
      SummaryBackend{},
      SummarySaverHook{{.save_steps = 8}, writer, runhooks::scalars<MySummary, MySummary2>}};
  for (int i = 0; i < 10; ++i) session.run();
  session.close();
  CHECK(writer.state->scalars == Scalars{{1, {{"my_summary", 1.0f}, {"my_summary2", 2.0f}}},
                                         {9, {{"my_summary", 2.0f}, {"my_summary2", 4.0f}}}});
}

TEST_CASE("J90 test_save_secs_saving_once_every_step: save_secs=0.5, +0.5 s per run") {
  CaptureWriter writer;
  ManualClock clock(1484695987.209386);
  runhooks::SingularMonitoredSession session{
      SummaryBackend{},
      SummarySaverHook{{.save_secs = 0.5}, writer, runhooks::scalars<MySummary>, clock}};
  for (int i = 0; i < 4; ++i) {
    session.run();
    clock.advance(0.5);
  }
  session.close();
  CHECK(writer.state->scalars == Scalars{{1, {{"my_summary", 1.0f}}},
                                         {2, {{"my_summary", 2.0f}}},
                                         {3, {{"my_summary", 3.0f}}},
                                         {4, {{"my_summary", 4.0f}}}});
}

TEST_CASE("J90 test_save_secs_saving_once_every_three_steps: save_secs=9, +3.1 s per run") {
  CaptureWriter writer;
  ManualClock clock(1484695987.209386);
  runhooks::SingularMonitoredSession session{
      SummaryBackend{},
      SummarySaverHook{{.save_secs = 9.0}, writer, runhooks::scalars<MySummary>, clock}};
  for (int i = 0; i < 8; ++i) {
    session.run();
    clock.advance(3.1);
  }
  session.close();
  CHECK(writer.state->scalars == Scalars{{1, {{"my_summary", 1.0f}}},
                                         {4, {{"my_summary", 2.0f}}},
                                         {7, {{"my_summary", 3.0f}}}});
}

TEST_CASE("SummarySaverHook: a restored global step; begin() makes the next run a first run") {
  CaptureWriter writer;
  SummarySaverHook hook{{.save_steps = 10}, writer, runhooks::scalars<MySummary>};
  {
    runhooks::SingularMonitoredSession session{SummaryBackend{.step = 100}, std::ref(hook)};
    for (int i = 0; i < 12; ++i) session.run();
  }
  CHECK(writer.state->session_starts == std::vector<std::int64_t>{101});
  CHECK(writer.state->scalars.size() == 2);  // 101 and 111
  CHECK(writer.state->scalars.count(111) == 1);
  {
    runhooks::SingularMonitoredSession session{SummaryBackend{.step = 112}, std::ref(hook)};
    session.run();  // begin() again: a first run, whatever the timer says
  }
  CHECK(writer.state->session_starts == std::vector<std::int64_t>{101, 113});
  CHECK(writer.state->scalars.count(113) == 1);
}

TEST_CASE("SummarySaverHook: a recovery that lowers the global step writes at once") {
  CaptureWriter writer;
  std::int64_t restore_to = 0;
  int lose_at_run = 31;
  runhooks::MonitoredSession session{
      runhooks::SessionCreator{[&] { return SummaryBackend{.step = restore_to}; },
                               runhooks::RetryForever{}},
      LoseOnce{&lose_at_run},
      SummarySaverHook{{.save_steps = 10}, writer, runhooks::scalars<MySummary>}};
  for (int i = 0; i < 30; ++i) session.run();
  CHECK(writer.state->scalars.size() == 3);  // 1, 11, 21
  restore_to = 5;
  session.run();  // lost; replayed on a backend restored at step 5: the step reaches 6
  CHECK(session.raw_session().step == 6);
  // TensorFlow would stay silent until step 31; runhooks' timer rule writes at once.
  CHECK(writer.state->scalars.count(6) == 1);
  CHECK(writer.state->session_starts == std::vector<std::int64_t>{1});  // not a first run
}

TEST_CASE("SummarySaverHook: histograms are TensorFlow's (default buckets, empty runs merged)") {
  runhooks::Histogram empty;
  const auto none = empty.buckets();
  CHECK(none.limits == std::vector<double>{DBL_MAX});
  CHECK(none.counts == std::vector<double>{0.0});
  CHECK(empty.min() == DBL_MAX);
  CHECK(empty.max() == -DBL_MAX);

  runhooks::Histogram h;
  for (const double v : {0.0, 1.0, 1.0, -2.5, 3.0}) h.add(v);
  CHECK(h.num() == 5.0);
  CHECK(h.sum() == 2.5);
  CHECK(h.sum_squares() == 17.25);
  CHECK(h.min() == -2.5);
  CHECK(h.max() == 3.0);
  const auto b = h.buckets();
  double total = 0.0;
  for (const double c : b.counts) total += c;
  CHECK(total == 5.0);
  CHECK(b.limits.back() == DBL_MAX);
  CHECK(runhooks::detail::default_bucket_limits().size() == 1551);

  CaptureWriter writer;
  runhooks::SingularMonitoredSession session{
      SummaryBackend{},
      SummarySaverHook{{.save_steps = 2}, writer, runhooks::histograms<Weights>}};
  for (int i = 0; i < 3; ++i) session.run();
  session.close();
  REQUIRE(writer.state->histograms.count(3) == 1);
  const runhooks::Histogram& at3 = writer.state->histograms.at(3).at("Weights");
  CHECK(at3.num() == 3.0);
  CHECK(at3.max() == 3.0);
  CHECK(at3.min() == -1.0);
}

TEST_CASE("SummarySaverHook: a NaN in a histogram is TensorFlow's error") {
  struct NanWeights : runhooks::Key<std::vector<float>> {};
  struct Backend : SummaryBackend {
    using SummaryBackend::fetch;
    std::vector<float> fetch(NanWeights) const { return {1.0f, std::nanf("")}; }
  };
  CaptureWriter writer;
  runhooks::SingularMonitoredSession session{
      Backend{}, SummarySaverHook{{.save_steps = 1}, writer, runhooks::histograms<NanWeights>}};
  CHECK_THROWS_WITH_AS(session.run(), "Nan in summary histogram for: NanWeights",
                       std::invalid_argument);
}

TEST_CASE("SummarySaverHook writes event files that TensorBoard reads") {
  const hook_test::TempDir dir;
  {
    runhooks::SingularMonitoredSession session{
        SummaryBackend{},
        SummarySaverHook{{.save_steps = 8}, dir.path() / "logs",
                         runhooks::scalars<MySummary, MySummary2>, runhooks::histograms<Weights>}};
    for (int i = 0; i < 10; ++i) session.run();
  }
  std::vector<hook_test::fs::path> files;
  for (const auto& entry : hook_test::fs::directory_iterator(dir.path() / "logs"))
    files.push_back(entry.path());
  REQUIRE(files.size() == 1);
  CHECK(files[0].filename().string().rfind("events.out.tfevents.", 0) == 0);

  const auto script = hook_test::tool("read_summaries.py");
  if (!script) {
    MESSAGE("skipped: set RUNHOOKS_SOURCE_DIR to the source tree to run tools/read_summaries.py");
    return;
  }
  if (!hook_test::python_has("tensorboard")) {
    MESSAGE("skipped: the tensorboard Python package is not installed (pip install tensorboard)");
    return;
  }
  const auto run = hook_test::run_python(*script, hook_test::shell_quote(files[0].string()), dir.path());
  INFO("stderr: ", run.err);
  REQUIRE(run.status == 0);

  std::vector<std::string> lines;
  std::istringstream in(run.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  auto has = [&](const std::string& text) {
    for (const auto& line : lines)
      if (line == text) return true;
    return false;
  };
  auto histogram_at = [&](std::int64_t step) -> std::string {
    const std::string prefix = "histogram\tWeights\t" + std::to_string(step) + "\t";
    for (const auto& line : lines)
      if (line.rfind(prefix, 0) == 0) return line;
    return "";
  };
  CHECK(has("records\t4"));  // file version, START, the summaries at 1 and 9
  CHECK(has("session_log\t1\tSTART"));
  CHECK(has("scalar\tmy_summary\t1\t1"));
  CHECK(has("scalar\tmy_summary2\t1\t2"));
  CHECK(has("scalar\tmy_summary\t9\t2"));
  CHECK(has("scalar\tmy_summary2\t9\t4"));
  // min, max, num, sum, sum_squares at step 9: -1, 9, 3, 8.5, 82.25.
  const std::string at9 = histogram_at(9);
  CHECK(at9.rfind("histogram\tWeights\t9\t-1.0\t9.0\t3.0\t8.5\t82.25\t", 0) == 0);
  // The buckets TensorBoard read are the ones runhooks::Histogram made (Python's repr and
  // C++'s %.17g agree on these numbers' digits once both are parsed).
  auto buckets_of = [](const std::string& line) {
    std::vector<std::string> fields;
    std::istringstream f(line);
    for (std::string field; std::getline(f, field, '\t');) fields.push_back(field);
    std::vector<double> limits, counts;
    auto parse = [](const std::string& csv, std::vector<double>& out) {
      std::istringstream c(csv);
      for (std::string x; std::getline(c, x, ',');) out.push_back(std::stod(x));
    };
    if (fields.size() == 10) {
      parse(fields[8], limits);
      parse(fields[9], counts);
    }
    return std::pair(limits, counts);
  };
  runhooks::Histogram expected9;
  for (const double v : {0.5, -1.0, 9.0}) expected9.add(v);
  const auto [limits9, counts9] = buckets_of(at9);
  CHECK(limits9 == expected9.buckets().limits);
  CHECK(counts9 == expected9.buckets().counts);
}
