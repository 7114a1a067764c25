// ProgressBarHook: the terminal bar and the plain lines, the redraw rate bound, the total from a
// linked StopAtStepHook (found by type at compile time), the lazy fetch of the shown keys, option
// validation, tqdm's number formats, and log lines around a live bar (in a file here;
// progress_bar_terminal.cpp does it on a real pseudo-terminal).

#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/log.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using runhooks::ManualClock;
using runhooks::ProgressBarHook;

namespace {

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};

struct Backend {
  std::int64_t step = 0;
  int loss_fetches = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) {
    ++loss_fetches;
    return 1.0f / static_cast<float>(step);
  }
};

// No global step: the bar counts runs.
struct Stepless {
  void run() {}
};

// A temporary file standing in for stderr; text() is all that was written.
class Capture {
 public:
  Capture() : file_(std::tmpfile()) { REQUIRE(file_ != nullptr); }
  ~Capture() { std::fclose(file_); }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  std::FILE* file() const { return file_; }
  std::string text() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string out;
    for (int c; (c = std::fgetc(file_)) != EOF;) out += static_cast<char>(c);
    std::fseek(file_, 0, SEEK_END);
    return out;
  }
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::string line;
    for (const char c : text()) {
      if (c == '\n') {
        out.push_back(line);
        line.clear();
      } else {
        line += c;
      }
    }
    if (!line.empty()) out.push_back(line);
    return out;
  }

 private:
  std::FILE* file_;
};

std::size_t count(const std::string& text, char c) {
  std::size_t n = 0;
  for (const char x : text) n += x == c;
  return n;
}

}  // namespace

TEST_CASE("ProgressBarHook, plain lines (not a terminal): one per plain_line_secs, and the final one") {
  Capture out;
  ManualClock clock(1000.0);
  runhooks::MonitoredSession session{
      Backend{}, runhooks::StopAtStepHook({.last_step = 40}),
      ProgressBarHook{runhooks::keys<Loss>,
                      {.total = 40, .plain_line_secs = 10.0, .terminal = false}, out.file(), clock}};
  while (!session.should_stop()) {
    session.run();
    clock.advance(1.0);  // one step per second: a line every 10 steps
  }
  session.close();
  // The rate counts from the first draw (step 1 at 1000 s): 10 steps in 10 s, then at the end
  // 39 steps in 40 s. The final line reads the loss again, and has no ETA.
  const auto lines = out.lines();
  REQUIRE(lines.size() == 5);
  CHECK(lines[0] == "progress: step 1/40 (2%), elapsed 00:00, loss=1");
  CHECK(lines[1] == "progress: step 11/40 (27%), 1.00 it/s, elapsed 00:10, ETA 00:29, loss=0.09091");
  CHECK(lines[3] == "progress: step 31/40 (77%), 1.00 it/s, elapsed 00:30, ETA 00:09, loss=0.03226");
  // Under one step a second, seconds per step: 40 s / 39 steps.
  CHECK(lines[4] == "progress: step 40/40 (100%), 1.03 s/it, elapsed 00:40, loss=0.025");
  // The loss was fetched on the 4 runs that drew, not on 40, and once more by end().
  CHECK(session.raw_session().loss_fetches == 5);
  CHECK(session.hook<1>().draws() == 5);
}

TEST_CASE("ProgressBarHook on a terminal: redraws in place, at most redraws_per_sec per second") {
  Capture out;
  ManualClock clock(0.0);
  runhooks::MonitoredSession session{
      Backend{},
      ProgressBarHook{{.total = 10000, .redraws_per_sec = 10.0, .width = 10, .terminal = true},
                      out.file(), clock}};
  for (int i = 0; i < 10000; ++i) {
    session.run();
    clock.advance(0.001);  // 10 s in all
  }
  session.close();
  const std::string text = out.text();
  const auto draws = session.hook<0>().draws();
  CHECK(draws <= 10 * 10 + 2);  // the first draw, one per 0.1 s, the final one
  CHECK(draws >= 90);
  CHECK(count(text, '\r') == static_cast<std::size_t>(draws));
  CHECK(count(text, '\n') == 1);  // one line, ended by end()
  const std::string last = text.substr(text.rfind('\r') + 1);
  CHECK(last == "10000/10000 [==========] 100%  1.00k it/s  00:10\x1b[K\n");
  const std::string first = text.substr(1, text.find('\r', 1) - 1);
  CHECK(first == "1/10000 [>.........]   0%  00:00\x1b[K");
}

TEST_CASE("ProgressBarHook: the per-step cost is a timer check, the clock is sampled") {
  Capture out;
  ManualClock clock(0.0);
  ProgressBarHook bar{{.redraws_per_sec = 2.0, .terminal = true}, out.file(), clock};
  runhooks::MonitoredSession session{Backend{}, std::ref(bar)};
  for (int i = 0; i < 200000; ++i) {
    session.run();
    clock.advance(1e-5);  // 2 s
  }
  CHECK(bar.draws() <= 5);
  CHECK(bar.draws() >= 4);
  CHECK(bar.clock().now() > 0.0);
}

TEST_CASE("ProgressBarHook: the total comes from a StopAtStepHook linked at compile time") {
  Capture out;
  ManualClock clock(0.0);
  runhooks::MonitoredSession session{
      Backend{.step = 100}, runhooks::StopAtStepHook({.num_steps = 50}),
      ProgressBarHook{{.plain_line_secs = 1e6, .terminal = false}, out.file(), clock}};
  CHECK_FALSE(session.hook<1>().total().has_value());
  runhooks::link_hooks(session);
  CHECK(session.hook<1>().total() == 150);  // num_steps counted from the restored step
  while (!session.should_stop()) {
    session.run();
    clock.advance(0.5);
  }
  session.close();
  const auto lines = out.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "progress: step 101/150 (67%), elapsed 00:00");
  CHECK(lines[1] == "progress: step 150/150 (100%), 1.96 it/s, elapsed 00:25");
  // An option wins over the linked hook.
  ProgressBarHook fixed{{.total = 7}};
  runhooks::StopAtStepHook stop({.last_step = 9});
  fixed.link(stop);
  CHECK(fixed.total() == 7);
}

TEST_CASE("ProgressBarHook without a total or a global step counts runs") {
  Capture out;
  ManualClock clock(0.0);
  runhooks::MonitoredSession session{
      Stepless{}, ProgressBarHook{{.redraws_per_sec = 1.0, .terminal = true}, out.file(), clock}};
  for (int i = 0; i < 3; ++i) {
    session.run();
    clock.advance(1.0);
  }
  session.close();
  const std::string text = out.text();
  CHECK(text.substr(text.rfind('\r') + 1) == "3 steps  1.50 s/it  00:03\x1b[K\n");
}

TEST_CASE("ProgressBarHook: a session that ends by an error still ends the line") {
  Capture out;
  {
    struct Fails : Backend {
      void run() { throw std::runtime_error("failed"); }
    };
    runhooks::MonitoredSession session{Fails{}, ProgressBarHook{{.terminal = true}, out.file()}};
    CHECK_THROWS_AS(session.run(), std::runtime_error);
  }
  // The failed first run drew nothing; the destructor's end() (a normal scope exit) drew the
  // final state and ended the line.
  CHECK(out.text() == "\r0 steps  00:00\x1b[K\n");
  {
    ManualClock clock(0.0);
    std::optional<runhooks::MonitoredSession<Backend, ProgressBarHook<runhooks::Keys<>, ManualClock>>> session;
    session.emplace(Backend{}, ProgressBarHook{{.terminal = true}, out.file(), clock});
    session->run();
    CHECK(out.text().back() != '\n');
    session.reset();
    CHECK(out.text().back() == '\n');
  }
}

TEST_CASE("ProgressBarHook: options are validated") {
  using O = runhooks::ProgressBarOptions;
  CHECK_THROWS_WITH_AS((O{.total = -1}.validate()),
                       "runhooks: ProgressBarOptions::total must be at least 0, got -1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.redraws_per_sec = 0.0}.validate()),
                       doctest::Contains("ProgressBarOptions::redraws_per_sec"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.plain_line_secs = -5.0}.validate()),
                       doctest::Contains("ProgressBarOptions::plain_line_secs"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((O{.width = 0}.validate()),
                       "runhooks: ProgressBarOptions::width must be 1 to 200, got 0.",
                       std::invalid_argument);
}

// Expectations printed by tqdm 4.70.1 itself: tqdm.format_sizeof(x) for each x, and the rate part
// of tqdm.format_meter(n, total, elapsed, unit_scale=True) ("2.50s/it", "16.4kit/s"), to which
// ours adds a space before the unit.
TEST_CASE("tqdm's format_sizeof: three significant digits and an SI prefix") {
  using runhooks::detail::format_sizeof;
  const std::pair<double, const char*> tqdm[] = {
      {0, "0.00"},          {1, "1.00"},           {9, "9.00"},          {9.99, "9.99"},
      {9.994999, "9.99"},   {9.995, "10.0"},       {9.999, "10.0"},      {99.9, "99.9"},
      {99.949, "99.9"},     {99.95, "100"},        {99.99, "100"},       {999, "999"},
      {999.4, "999"},       {999.49, "999"},       {999.5, "1.00k"},     {999.9, "1.00k"},
      {1000, "1.00k"},      {1001, "1.00k"},       {1234, "1.23k"},      {9999, "10.0k"},
      {10000, "10.0k"},     {16400, "16.4k"},      {99999, "100k"},      {999499, "999k"},
      {999500, "1.00M"},    {999999, "1.00M"},     {1e6, "1.00M"},       {1.2e6, "1.20M"},
      {123456789, "123M"},  {1.5e9, "1.50G"},      {1e12, "1.00T"},      {1.5e15, "1.50P"},
      {1e18, "1.00E"},      {1e21, "1.00Z"},       {1e24, "1.0Y"},       {1e27, "1000.0Y"},
      {0.5, "0.50"},        {0.123, "0.12"},       {0.125, "0.12"},      {0.375, "0.38"},
      {0.995, "0.99"},      {1.005, "1.00"},       {2.675, "2.67"},      {0.001, "0.00"},
  };
  for (const auto& example : tqdm) {
    const double x = example.first;  // not a structured binding: clang before 16 cannot capture one
    INFO("format_sizeof(" << x << ")");
    CHECK(format_sizeof(x) == example.second);
  }
}

TEST_CASE("A rate as tqdm shows it: it/s, and s/it under one step a second") {
  using runhooks::detail::format_rate;
  CHECK(format_rate(16400.0) == "16.4k it/s");  // format_meter(49200, None, 3.0): 16.4kit/s
  CHECK(format_rate(0.4) == "2.50 s/it");       // format_meter(2, 10, 5.0): 2.50s/it
  CHECK(format_rate(1.0) == "1.00 it/s");       // format_meter(5, 10, 5.0): 1.00it/s
  CHECK(format_rate(36.4) == "36.4 it/s");
  CHECK(format_rate(1.2e6) == "1.20M it/s");
  CHECK(format_rate(1.0 / 90.0) == "90.0 s/it");
  CHECK(format_rate(0.0) == "0.00 it/s");  // tqdm: "?it/s"; here the rate is known, and 0
}

TEST_CASE("ProgressBarHook: a fast and a slow bar show tqdm's rates") {
  Capture out;
  ManualClock clock(0.0);
  {
    runhooks::MonitoredSession session{
        Backend{}, ProgressBarHook{{.redraws_per_sec = 1.0, .terminal = true}, out.file(), clock}};
    for (int i = 0; i < 16401; ++i) {
      session.run();
      clock.advance(1.0 / 16400.0);
    }
  }
  const std::string fast = out.text();
  CHECK(fast.substr(fast.rfind('\r') + 1) == "16401 steps  16.4k it/s  00:01\x1b[K\n");
  Capture slow_out;
  runhooks::MonitoredSession slow{
      Backend{}, ProgressBarHook{{.total = 10, .redraws_per_sec = 1.0, .width = 30, .terminal = true},
                                 slow_out.file(), clock}};
  for (int i = 0; i < 3; ++i) {
    slow.run();
    clock.advance(2.5);
  }
  const std::string text = slow_out.text();
  const std::size_t last = text.rfind('\r');
  CHECK(text.substr(last + 1) == "3/10 [=========>....................]  30%  2.50 s/it  ETA 00:18\x1b[K");
}

namespace {
std::vector<std::string> sunk;
void keep_line(runhooks::Severity, std::string_view line) { sunk.emplace_back(line); }
}  // namespace

TEST_CASE("ProgressBarHook: a log line erases the bar on its stream, and the bar is drawn again") {
  Capture out;
  ManualClock clock(0.0);
  sunk.clear();
  const runhooks::LogSink previous = runhooks::set_log_sink(&keep_line);
  std::optional<runhooks::MonitoredSession<Backend, ProgressBarHook<runhooks::Keys<>, ManualClock>>> session;
  session.emplace(Backend{}, ProgressBarHook{{.total = 4, .width = 4, .terminal = true}, out.file(), clock});
  runhooks::log(runhooks::Severity::info, "before");  // no bar yet: nothing on its stream
  CHECK(out.text().empty());
  session->run();
  const std::string bar = "\r1/4 [=>..]  25%  00:00\x1b[K";
  CHECK(out.text() == bar);
  runhooks::log(runhooks::Severity::info, "saved");
  CHECK(out.text() == bar + "\r\x1b[K" + bar);  // erased, the sink, drawn again
  // A copy of the bar does not own the line: destroying it writes nothing.
  {
    auto copy = session->hook<0>();
    (void)copy;
  }
  CHECK(out.text() == bar + "\r\x1b[K" + bar);
  session->close();  // the final draw ends the line: later log lines leave the stream alone
  const std::string ended = out.text();
  CHECK(ended.back() == '\n');
  runhooks::log(runhooks::Severity::info, "after");
  CHECK(out.text() == ended);
  runhooks::set_log_sink(previous);
  // The sink got the lines unchanged, without escape codes.
  CHECK((sunk == std::vector<std::string>{"before", "saved", "after"}));
}

TEST_CASE("The bar's terminal line: a move carries the open line and its registration, a copy not") {
  Capture out;
  sunk.clear();
  const runhooks::LogSink previous = runhooks::set_log_sink(&keep_line);
  std::optional<runhooks::detail::TerminalLine> line;
  line.emplace();
  line->draw(out.file(), "12 steps", false);
  runhooks::detail::TerminalLine moved(std::move(*line));
  line.reset();  // the moved-from line is closed: its destructor writes nothing
  CHECK(out.text() == "\r12 steps\x1b[K");
  runhooks::log(runhooks::Severity::info, "saved");
  CHECK(out.text() == "\r12 steps\x1b[K\r\x1b[K\r12 steps\x1b[K");
  {
    runhooks::detail::TerminalLine copy(moved);  // not open: its destructor writes nothing
    runhooks::detail::TerminalLine assigned;
    assigned = std::move(moved);
    CHECK(out.text() == "\r12 steps\x1b[K\r\x1b[K\r12 steps\x1b[K");
  }  // `assigned` ends the line it took, and no log line looks for it any more
  CHECK(out.text() == "\r12 steps\x1b[K\r\x1b[K\r12 steps\x1b[K\n");
  runhooks::log(runhooks::Severity::info, "after");
  CHECK(out.text() == "\r12 steps\x1b[K\r\x1b[K\r12 steps\x1b[K\n");
  runhooks::set_log_sink(previous);
  CHECK((sunk == std::vector<std::string>{"saved", "after"}));
}

TEST_CASE("ProgressBarHook in plain mode: log lines leave its stream alone") {
  Capture out;
  ManualClock clock(0.0);
  sunk.clear();
  const runhooks::LogSink previous = runhooks::set_log_sink(&keep_line);
  {
    // Neither forced nor a terminal (a file): plain lines.
    runhooks::MonitoredSession session{Backend{}, ProgressBarHook{{.total = 4}, out.file(), clock}};
    session.run();
    runhooks::log(runhooks::Severity::info, "saved");
    session.run();
  }
  runhooks::set_log_sink(previous);
  CHECK(out.text() == "progress: step 1/4 (25%), elapsed 00:00\nprogress: step 2/4 (50%), elapsed 00:00\n");
  CHECK((sunk == std::vector<std::string>{"saved"}));
}
