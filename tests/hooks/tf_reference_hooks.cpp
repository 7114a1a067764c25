// Replays what TensorFlow 2.21 (and Keras, for EarlyStopping) recorded in
// tests/fixtures/tf_reference/hook_fixtures.hpp (tools/tf_reference/hooks.py) through runhooks'
// hooks, and compares: the lines LoggingTensorHook logs and when, the summaries, histograms and
// session logs SummarySaverHook writes and at which steps, the timeline files ProfilerHook has
// written after each run, NanTensorHook's stop or error, FinalOpsHook's values, TensorFlow's
// histograms bit for bit, and the epoch at which Keras' EarlyStopping stops.
//
// How the TensorFlow devices map onto runhooks:
//   - TensorFlow's tests drive the hooks with a _HookedSession after begin(); here a
//     SingularMonitoredSession runs them (it calls begin() and after_create_session()), and the
//     `end` action is close(), which calls every end().
//   - Tensors built on the global-step read hold the step before the run: the backend keeps the
//     step before its run() for them.
//   - The mocked clock is a ManualClock, moved by the same actions.
//   - DELIBERATE DIFFERENCE (docs/coming-from-tensorflow.md, table of differences): NanTensorHook logs its failure at
//     warning level; runhooks::log has no error level. Log levels "error" compare as warning.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <runhooks/error.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/final_ops_hook.hpp>
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/hooks/nan_tensor_hook.hpp>
#include <runhooks/hooks/profiler_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/summary/histogram.hpp>

#include <fixtures/tf_reference/hook_fixtures.hpp>

#include "support/hook_test_support.hpp"

namespace fx = runhooks_test::tf_reference::hooks;
namespace fs = std::filesystem;

namespace {

// ------------------------------------------------------------------------ logs, by action

struct Log {
  std::size_t* action = nullptr;
  std::vector<std::string> lines;
};
Log* g_log = nullptr;
void capture(runhooks::Severity severity, std::string_view line) {
  if (g_log == nullptr) return;
  g_log->lines.push_back("a" + std::to_string(*g_log->action) +
                         (severity == runhooks::Severity::info ? " I " : " W ") +
                         std::string(line));
}
struct LogCapture {
  explicit LogCapture(Log& log) : previous(runhooks::set_log_sink(&capture)) { g_log = &log; }
  ~LogCapture() {
    g_log = nullptr;
    runhooks::set_log_sink(previous);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  runhooks::LogSink previous;
};

std::vector<std::string> expected_logs(std::span<const fx::LogLine> logs) {
  std::vector<std::string> out;
  for (const auto& l : logs) {
    const std::string message(l.message);
    out.push_back("a" + std::to_string(l.action) + (l.level == fx::LogLevel::info ? " I " : " W ") +
                  message);
  }
  return out;
}

// Lines as one text, so that a mismatch prints both sides in full.
std::string text(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

void apply_clock(runhooks::ManualClock& clock, const fx::Action& a) {
  if (a.kind == fx::ActionKind::advance_clock) clock.advance(a.secs);
  if (a.kind == fx::ActionKind::set_clock) clock.set(fx::start_time + a.secs);
}

// ------------------------------------------------------------------------ LoggingTensorHook

struct Foo : runhooks::Key<float> {
  static constexpr std::string_view name = "foo:0";
};
struct X : runhooks::Key<float> {
  static constexpr std::string_view name = "x:0";
};
struct N : runhooks::Key<std::int64_t> {
  static constexpr std::string_view name = "n:0";
};
struct C : runhooks::Key<double> {
  static constexpr std::string_view name = "c:0";
};

// The train op adds 1; x and n are built on the read from before it.
struct TensorBackend {
  std::int64_t step = 0;
  std::int64_t before = 0;
  void run() {
    before = step;
    ++step;
  }
  std::int64_t global_step() const { return step; }
  float fetch(Foo) const { return 42.0f; }
  float fetch(X) const { return static_cast<float>(before) * 0.25f; }
  std::int64_t fetch(N) const { return before; }
  double fetch(C) const { return 1e-5; }
};


// Outside a run the read tensor holds the current step (TensorFlow's end() runs the tensors on
// the raw session): placed first, this device makes the backend say so before any other end().
struct ReadIsCurrentAtEnd {
  void end(TensorBackend& backend) const { backend.before = backend.step; }
};

template <class... Ks>
std::vector<std::string> replay_logging(const fx::LoggingScenario& s) {
  Log log;
  std::size_t action = 0;
  log.action = &action;
  LogCapture capture_guard(log);
  runhooks::ManualClock clock(fx::start_time);
  const runhooks::LoggingTensorOptions options{
      .every_n_iter = s.every_n_iter, .every_n_secs = s.every_n_secs, .at_end = s.at_end};
  auto formatter = [](const auto& values) {
    return "qqq=" + runhooks::format_value(values[runhooks::detail::first_t<Ks...>{}]);
  };
  auto drive = [&](auto hook) {
    runhooks::SingularMonitoredSession session{TensorBackend{}, ReadIsCurrentAtEnd{}, std::move(hook)};
    for (action = 0; action < s.actions.size(); ++action) {
      const fx::Action& a = s.actions[action];
      if (a.kind == fx::ActionKind::run) session.run();
      else if (a.kind == fx::ActionKind::end) session.close();
      else apply_clock(clock, a);
    }
  };
  if (s.formatter)
    drive(runhooks::LoggingTensorHook{runhooks::keys<Ks...>, options, formatter, clock});
  else
    drive(runhooks::LoggingTensorHook{runhooks::keys<Ks...>, options, clock});
  return log.lines;
}

std::vector<std::string> replay_logging_scenario(const fx::LoggingScenario& s) {
  if (s.tensors == "foo,x") return replay_logging<Foo, X>(s);
  if (s.tensors == "n,x") return replay_logging<N, X>(s);
  if (s.tensors == "foo") return replay_logging<Foo>(s);
  if (s.tensors == "foo,n,c") return replay_logging<Foo, N, C>(s);
  FAIL("no replay for the tensors " << s.tensors);
  return {};
}

// ------------------------------------------------------------------------ SummarySaverHook

struct MySummary : runhooks::Key<float> {
  static constexpr std::string_view name = "my_summary";
};
struct MySummary2 : runhooks::Key<float> {
  static constexpr std::string_view name = "my_summary2";
};
struct H : runhooks::Key<std::vector<float>> {
  static constexpr std::string_view name = "h";
};

// var = Variable(0.0); tensor = assign_add(var, 1.0), run once in each step that fetches it.
struct SummaryBackend {
  std::int64_t step = 0;
  float var = 0.0f;
  std::int64_t added_at = -1;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float tensor() {
    if (added_at != step) {
      var += 1.0f;
      added_at = step;
    }
    return var;
  }
  float fetch(MySummary) { return tensor(); }
  float fetch(MySummary2) { return tensor() * 2.0f; }
  std::vector<float> fetch(H) {
    const float v = tensor();
    return {v, -v, 0.5f};
  }
};

struct Written {
  std::vector<std::string> values, histograms, session_logs;
  std::vector<std::size_t> flushes;
};

std::string join(std::span<const double> xs) {
  std::string out;
  char text[40];
  for (const double x : xs) {
    std::snprintf(text, sizeof text, "%s%.17g", out.empty() ? "" : ",", x);
    out += text;
  }
  return out;
}

std::string histogram_line(std::size_t action, std::int64_t step, std::string_view tag, double min,
                           double max, double num, double sum, double sum_squares,
                           std::span<const double> limits, std::span<const double> counts) {
  char head[256];
  std::snprintf(head, sizeof head, "a%zu step=%lld %.*s min=%.17g max=%.17g num=%.17g sum=%.17g "
                "sum_squares=%.17g ", action, static_cast<long long>(step),
                static_cast<int>(tag.size()), tag.data(), min, max, num, sum, sum_squares);
  return head + join(limits) + " | " + join(counts);
}

// TensorFlow's FakeSummaryWriter, keyed by action.
struct CaptureWriter {
  std::size_t* action;
  Written* out;
  void write_summary(const std::vector<runhooks::SummaryItem>& values, std::int64_t step) {
    for (const auto& v : values) {
      if (const float* scalar = std::get_if<float>(&v.value)) {
        char text[128];
        std::snprintf(text, sizeof text, "a%zu step=%lld %s=%.9g", *action,
                      static_cast<long long>(step), v.tag.c_str(), static_cast<double>(*scalar));
        out->values.push_back(text);
      } else {
        const auto& h = std::get<runhooks::Histogram>(v.value);
        const auto b = h.buckets();
        out->histograms.push_back(histogram_line(*action, step, v.tag, h.min(), h.max(), h.num(),
                                                 h.sum(), h.sum_squares(), b.limits, b.counts));
      }
    }
  }
  void write_session_start(std::int64_t step) {
    out->session_logs.push_back("a" + std::to_string(*action) + " step=" + std::to_string(step) +
                                " START");
  }
  void flush() { out->flushes.push_back(*action); }
};

Written expected_written(const fx::SummaryScenario& s) {
  Written w;
  for (const auto& v : s.values) {
    char text[128];
    std::snprintf(text, sizeof text, "a%zu step=%lld %.*s=%.9g", v.action,
                  static_cast<long long>(v.step), static_cast<int>(v.tag.size()), v.tag.data(),
                  v.value);
    w.values.push_back(text);
  }
  for (const auto& h : s.histograms)
    w.histograms.push_back(histogram_line(h.action, h.step, h.tag, h.min, h.max, h.num, h.sum,
                                          h.sum_squares, h.bucket_limit, h.bucket));
  for (const auto& l : s.session_logs)
    w.session_logs.push_back("a" + std::to_string(l.action) + " step=" + std::to_string(l.step) +
                             " " + std::string(l.status));
  w.flushes.assign(s.flushes.begin(), s.flushes.end());
  return w;
}

template <class Scalars, class Histograms>
Written replay_summary(const fx::SummaryScenario& s, Scalars scalars, Histograms histograms) {
  Written written;
  std::size_t action = 0;
  runhooks::ManualClock clock(fx::start_time);
  runhooks::SingularMonitoredSession session{
      SummaryBackend{},
      runhooks::SummarySaverHook{{.save_steps = s.save_steps, .save_secs = s.save_secs},
                                 CaptureWriter{&action, &written}, scalars, histograms, clock}};
  for (action = 0; action < s.actions.size(); ++action) {
    const fx::Action& a = s.actions[action];
    if (a.kind == fx::ActionKind::run) session.run();
    else if (a.kind == fx::ActionKind::end) session.close();
    else apply_clock(clock, a);
  }
  return written;
}

Written replay_summary_scenario(const fx::SummaryScenario& s) {
  using runhooks::histograms;
  using runhooks::scalars;
  if (s.summaries == "my_summary") return replay_summary(s, scalars<MySummary>, histograms<>);
  if (s.summaries == "my_summary,my_summary2,h")
    return replay_summary(s, scalars<MySummary, MySummary2>, histograms<H>);
  if (s.summaries == "my_summary,h") return replay_summary(s, scalars<MySummary>, histograms<H>);
  FAIL("no replay for the summaries " << s.summaries);
  return {};
}

// ------------------------------------------------------------------------ ProfilerHook

struct StepBackend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

std::string timeline_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("timeline-", 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// ------------------------------------------------------------------------ NanTensorHook, FinalOps

struct Loss : runhooks::Key<float> {};
struct LossBackend {
  std::span<const double> losses;
  std::int64_t step = 0;
  std::int64_t before = 0;
  void run() {
    before = step;
    ++step;
  }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return static_cast<float>(losses[static_cast<std::size_t>(before)]); }
};

std::string error_name(const std::exception& e) {
  if (dynamic_cast<const runhooks::NanLossDuringTrainingError*>(&e)) return "NanLossDuringTrainingError";
  if (dynamic_cast<const runhooks::OutOfRangeError*>(&e)) return "OutOfRangeError";
  return "?";
}

struct Four : runhooks::Key<std::int64_t> {};
struct Read : runhooks::Key<std::int64_t> {};
struct Values : runhooks::Key<std::vector<std::int64_t>> {};
struct Next : runhooks::Key<std::int64_t> {};
struct FinalBackend {
  std::int64_t step = 0;
  std::int64_t produced = 0;  // Dataset.range(1)
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  std::int64_t fetch(Four) const { return 4; }
  std::int64_t fetch(Read) const { return step; }
  std::vector<std::int64_t> fetch(Values) const { return {1, 6, 3, 5, 2, 4}; }
  std::int64_t fetch(Next) {
    if (produced >= 1) throw runhooks::OutOfRangeError("End of sequence");
    return produced++;
  }
};

}  // namespace

// ============================================================================ the tests

TEST_CASE("tf_reference_hooks: the fixtures come from the versions they claim") {
  CHECK(fx::tensorflow_version == "2.21.0");
  CHECK(fx::keras_version == "3.15.1");
}

TEST_CASE("tf_reference_hooks: LoggingTensorHook logs what TensorFlow logs, when it does") {
  for (const auto& s : fx::logging_scenarios) {
    INFO(s.name, ": ", s.description);
    CHECK(text(replay_logging_scenario(s)) == text(expected_logs(s.logs)));
  }
}

TEST_CASE("tf_reference_hooks: SummarySaverHook writes TensorFlow's summaries, histograms and START") {
  for (const auto& s : fx::summary_scenarios) {
    INFO(s.name, ": ", s.description);
    const Written ours = replay_summary_scenario(s);
    const Written theirs = expected_written(s);
    CHECK(text(ours.values) == text(theirs.values));
    CHECK(text(ours.histograms) == text(theirs.histograms));
    CHECK(text(ours.session_logs) == text(theirs.session_logs));
    CHECK(ours.flushes == theirs.flushes);
  }
}

TEST_CASE("tf_reference_hooks: ProfilerHook has TensorFlow's timeline files after each run") {
  for (const auto& s : fx::profiler_scenarios) {
    INFO(s.name, ": ", s.description);
    const hook_test::TempDir dir;
    Log log;
    std::size_t action = 0;
    log.action = &action;
    LogCapture capture_guard(log);
    runhooks::ManualClock clock(fx::start_time);
    std::vector<std::string> ours, theirs;
    {
      runhooks::SingularMonitoredSession session{
          StepBackend{},
          runhooks::ProfilerHook{{.save_steps = s.save_steps, .save_secs = s.save_secs},
                                 dir.path(), clock}};
      for (action = 0; action < s.actions.size(); ++action) {
        const fx::Action& a = s.actions[action];
        if (a.kind == fx::ActionKind::run) {
          session.run();
          ours.push_back("a" + std::to_string(action) + " " + timeline_names(dir.path()));
        } else {
          apply_clock(clock, a);
        }
      }
    }
    for (const auto& f : s.files) theirs.push_back("a" + std::to_string(f.action) + " " + std::string(f.names));
    CHECK(text(ours) == text(theirs));
    // Our lines name the whole path; TensorFlow's were recorded without the directory.
    std::vector<std::string> ours_stripped;
    for (std::string line : log.lines) {
      const std::string prefix = (dir.path() / "").string();
      for (std::size_t at; (at = line.find(prefix)) != std::string::npos;) line.erase(at, prefix.size());
      ours_stripped.push_back(line);
    }
    CHECK(text(ours_stripped) == text(expected_logs(s.logs)));
  }
}

TEST_CASE("tf_reference_hooks: NanTensorHook stops or fails where TensorFlow does") {
  for (const auto& s : fx::nan_scenarios) {
    INFO(s.name, ": ", s.description);
    Log log;
    std::size_t action = 0;
    log.action = &action;
    LogCapture capture_guard(log);
    std::vector<std::string> ours, theirs;
    runhooks::SingularMonitoredSession session{
        LossBackend{s.losses},
        runhooks::NanTensorHook<Loss>({.fail_on_nan_loss = s.fail_on_nan_loss})};
    for (action = 0; action < s.losses.size(); ++action) {
      std::string error;
      try {
        session.run();
      } catch (const std::exception& e) {
        error = error_name(e) + ": " + e.what();
      }
      ours.push_back("a" + std::to_string(action) + " stop=" + (session.should_stop() ? "1" : "0") +
                     " error=" + error);
      if (!error.empty() || session.should_stop()) break;
    }
    for (const auto& r : s.runs)
      theirs.push_back("a" + std::to_string(r.action) + " stop=" + (r.should_stop ? "1" : "0") +
                       " error=" + std::string(r.error));
    // After an error TensorFlow's _HookedSession keeps going; runhooks' session too (the
    // error leaves run(), the session is not stopped): should_stop matches.
    CHECK(text(ours) == text(theirs));
    CHECK(text(log.lines) == text(expected_logs(s.logs)));  // "error" compares as W: see the top
  }
}

TEST_CASE("tf_reference_hooks: FinalOpsHook reads TensorFlow's final values, or re-raises") {
  for (const auto& s : fx::final_ops_scenarios) {
    INFO(s.name, ": ", s.description);
    Log log;
    std::size_t action = 0;
    log.action = &action;
    LogCapture capture_guard(log);
    std::string error;
    std::vector<double> values;
    if (!s.out_of_range) {
      runhooks::FinalOpsHook hook{runhooks::keys<Four, Read, Values>};
      runhooks::SingularMonitoredSession session{FinalBackend{}, std::ref(hook)};
      for (int i = 0; i < s.runs_before_end; ++i) session.run();
      action = 1;
      session.close();
      const auto& v = *hook.final_ops_values();
      values = {static_cast<double>(v[Four{}]), static_cast<double>(v[Read{}])};
      for (const auto x : v[Values{}]) values.push_back(static_cast<double>(x));
    } else {
      runhooks::FinalOpsHook hook{runhooks::keys<Next>};
      runhooks::SingularMonitoredSession session{FinalBackend{}, std::ref(hook)};
      CHECK(session.raw_session().fetch(Next{}) == 0);  // sess.run(final_ops): the one element
      action = 1;
      try {
        session.close();
      } catch (const std::exception& e) {
        error = error_name(e);
      }
      CHECK_FALSE(hook.final_ops_values().has_value());
    }
    CHECK(values == std::vector<double>(s.values.begin(), s.values.end()));
    CHECK(error == s.error);
    std::vector<std::string> cut;
    for (const auto& line : log.lines) cut.push_back(line.substr(0, 5 + 120));  // "a1 W " + 120
    CHECK(text(cut) == text(expected_logs(s.logs)));
  }
}

TEST_CASE("tf_reference_hooks: runhooks::Histogram is TensorFlow's, bit for bit") {
  for (const auto& h : fx::histogram_fixtures) {
    INFO(h.name);
    runhooks::Histogram ours;
    for (const double v : h.held) ours.add(v);
    const auto b = ours.buckets();
    CHECK(histogram_line(0, 0, "h", ours.min(), ours.max(), ours.num(), ours.sum(),
                         ours.sum_squares(), b.limits, b.counts) ==
          histogram_line(0, 0, "h", h.min, h.max, h.num, h.sum, h.sum_squares, h.bucket_limit,
                         h.bucket));
    runhooks::SummaryEncoder encoder;
    encoder.add_histogram("h", ours);
    std::string hex;
    char two[3];
    for (const char c : encoder.summary()) {
      std::snprintf(two, sizeof two, "%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      hex += two;
    }
    CHECK(hex == h.summary_hex);
  }
}

TEST_CASE("tf_reference_hooks: EarlyStoppingHook stops where Keras' EarlyStopping does") {
  struct Metric : runhooks::Key<double> {};
  struct Backend {
    std::span<const double> values;
    std::int64_t step = 0;
    void run() { ++step; }
    std::int64_t global_step() const { return step; }
    double fetch(Metric) const { return values[static_cast<std::size_t>(step - 1)]; }
  };
  for (const auto& k : fx::early_stopping_fixtures) {
    INFO(k.name);
    Log log;
    std::size_t action = 0;
    log.action = &action;
    LogCapture capture_guard(log);
    runhooks::EarlyStoppingHook<Metric> hook(
        {.mode = k.mode == "max" ? runhooks::MetricMode::max : runhooks::MetricMode::min,
         .min_delta = k.min_delta,
         .patience = k.patience,
         .baseline = k.baseline,
         .start_from_check = k.start_from_epoch});
    runhooks::SingularMonitoredSession session{Backend{k.values}, std::ref(hook)};
    while (!session.should_stop() && session.raw_session().step < static_cast<std::int64_t>(k.values.size()))
      session.run();
    // Keras counts epochs from 0; the hook's steps are runs, from 1.
    std::optional<std::int64_t> stopped;
    if (hook.stopped_step()) stopped = *hook.stopped_step() - 1;
    CHECK(stopped == k.stopped_epoch);
    CHECK(hook.best() == k.best);
    CHECK(hook.best_step() == k.best_epoch + 1);
    CHECK(hook.wait() == k.wait);
  }
}
