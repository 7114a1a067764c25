// ProgressBarHook: the terminal bar and the plain lines, the redraw rate bound, the total from a
// linked StopAtStepHook (found by type at compile time), the lazy fetch of the shown keys, and
// option validation.

#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
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
  CHECK(lines[1] == "progress: step 11/40 (27%), 1 steps/s, elapsed 00:10, ETA 00:29, loss=0.09091");
  CHECK(lines[3] == "progress: step 31/40 (77%), 1 steps/s, elapsed 00:30, ETA 00:09, loss=0.03226");
  CHECK(lines[4] == "progress: step 40/40 (100%), 0.975 steps/s, elapsed 00:40, loss=0.025");
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
  CHECK(last == "10000/10000 [==========] 100%  1e+03 steps/s  00:10\x1b[K\n");
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
  CHECK(lines[1] == "progress: step 150/150 (100%), 1.96 steps/s, elapsed 00:25");
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
  CHECK(text.substr(text.rfind('\r') + 1) == "3 steps  0.667 steps/s  00:03\x1b[K\n");
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
