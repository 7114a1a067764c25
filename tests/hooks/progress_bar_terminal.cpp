// ProgressBarHook and runhooks::log on a real pseudo-terminal: while the bar is drawn, every log
// line (the default sink's, a program's own sink's, one from another thread) erases the bar's
// line first and the bar is drawn again below it, as tqdm.write does; a plain bar on a terminal
// gets no escape codes; and when the session's loop ends, the bar's line is ended before the
// program prints its next line. A child process writes to the terminal's slave side; the test
// reads the master side and checks both the bytes and the screen that a terminal would show.

#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/log.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

using runhooks::ManualClock;
using runhooks::ProgressBarHook;
using runhooks::Severity;

namespace {

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};

struct Backend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 16.0f / static_cast<float>(step + 1); }
};

// Runs `body` in a child process whose stdin, stdout and stderr are the slave side of a new
// pseudo-terminal, and returns all the child wrote, byte for byte: output post-processing is off,
// so a "\n" arrives as written (a terminal shows it as a new line, see Screen). The child's exit
// status must be 0.
template <class Body>
std::string run_on_terminal(Body body) {
  int master = -1;
  int slave = -1;
  winsize size{};
  size.ws_row = 24;
  size.ws_col = 200;
  REQUIRE(::openpty(&master, &slave, nullptr, nullptr, &size) == 0);
  termios modes{};
  REQUIRE(::tcgetattr(slave, &modes) == 0);
  modes.c_oflag &= ~static_cast<tcflag_t>(OPOST);
  REQUIRE(::tcsetattr(slave, TCSANOW, &modes) == 0);
  std::fflush(nullptr);  // nothing of the parent's buffers may reach the child's terminal
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(master);
    for (int fd = 0; fd <= 2; ++fd) ::dup2(slave, fd);
    if (slave > 2) ::close(slave);
    // A forked child keeps the parent's stdio state; a program started on a terminal has a
    // line-buffered stdout.
    std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
    int status = 0;
    try {
      body();
    } catch (const std::exception& error) {
      std::fprintf(stderr, "\nchild failed: %s\n", error.what());
      status = 3;
    } catch (...) {
      status = 4;
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
  ::close(slave);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    pollfd p{master, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready > 0) {
      char buffer[4096];
      const ssize_t n = ::read(master, buffer, sizeof buffer);
      if (n > 0) {
        out.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 || errno == EIO) break;  // every slave descriptor is closed: the child is done
      if (errno != EINTR && errno != EAGAIN) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      break;
    }
  }
  ::close(master);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  INFO("the child wrote: " << out);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return out;
}

// What a terminal shows for `bytes`: "\r" returns to the line's start, "\n" starts a new line (as
// with the usual output processing), "\x1b[K" erases from the cursor to the line's end, other
// characters overwrite. Any other escape sequence fails the test.
std::vector<std::string> screen(std::string_view bytes) {
  std::vector<std::string> rows(1);
  std::size_t column = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    std::string& row = rows.back();
    if (c == '\r') {
      column = 0;
    } else if (c == '\n') {
      rows.emplace_back();
      column = 0;
    } else if (c == '\x1b') {
      REQUIRE_MESSAGE(bytes.substr(i, 3) == "\x1b[K", "an unexpected escape sequence at " << i);
      if (row.size() > column) row.resize(column);
      i += 2;
    } else {
      if (row.size() < column) row.resize(column, ' ');
      if (column < row.size()) row[column] = c;
      else row += c;
      ++column;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

bool is_bar(std::string_view text) {
  return !text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) != 0 &&
         text.find(" [") != std::string_view::npos;
}

// Checks that `line` (a whole log line as the sink writes it, "\n" included) is in `bytes` from
// `from` on, and that the bar it interrupted was erased before it and drawn again, unchanged,
// after it. Returns where the search for the next line starts.
std::size_t check_between_bars(std::string_view bytes, std::string_view line, std::size_t from) {
  const std::size_t at = bytes.find(line, from);
  REQUIRE_MESSAGE(at != std::string_view::npos, "the log line '" << line << "' is missing");
  INFO("the log line '" << line << "' at byte " << at << " in: " << bytes);
  // Erased first: "\r\x1b[K" right after the bar's own "\r<bar>\x1b[K".
  REQUIRE(at >= 8);
  CHECK(bytes.substr(at - 4, 4) == "\r\x1b[K");
  const std::size_t bar_end = at - 7;  // where the bar's "\x1b[K" starts
  REQUIRE(bytes.substr(bar_end, 3) == "\x1b[K");
  const std::size_t bar_start = bytes.rfind('\r', bar_end) + 1;
  const std::string_view bar = bytes.substr(bar_start, bar_end - bar_start);
  CHECK_MESSAGE(is_bar(bar), "not a bar before the log line: '" << bar << "'");
  // Drawn again right below, the same text.
  const std::string redraw = "\r" + std::string(bar) + "\x1b[K";
  CHECK(bytes.substr(at + line.size(), redraw.size()) == redraw);
  return at + line.size();
}

// A line that no bar was drawn around: at the start of a line, no escape code before it.
std::size_t check_alone(std::string_view bytes, std::string_view line, std::size_t from) {
  const std::size_t at = bytes.find(line, from);
  REQUIRE_MESSAGE(at != std::string_view::npos, "the log line '" << line << "' is missing");
  INFO("the log line '" << line << "' at byte " << at << " in: " << bytes);
  CHECK((at == 0 || bytes[at - 1] == '\n'));
  CHECK((at < 4 || bytes.substr(at - 4, 4) != "\r\x1b[K"));
  return at + line.size();
}

// The child's training: 40 steps, a redraw every 2 steps (a redraw per 0.1 s, 0.05 s per step),
// a log line every 10 steps, one before the bar is drawn and one after the session ends.
void train_and_log(const ProgressBarHook<runhooks::Keys<Loss>, ManualClock>& prototype) {
  runhooks::log(Severity::info, "runhooks: before the first step");
  {
    runhooks::MonitoredSession session{Backend{}, runhooks::StopAtStepHook({.last_step = 40}),
                                       prototype};
    runhooks::link_hooks(session);
    while (!session.should_stop()) {
      session.run();
      session.hook<1>().clock().advance(0.05);
      const std::int64_t step = session.raw_session().step;
      if (step % 10 == 0 && step < 40)
        runhooks::log(step == 20 ? Severity::warning : Severity::info,
                      "runhooks: saved checkpoint for step " + std::to_string(step));
    }
    session.close();
  }
  runhooks::log(Severity::info, "runhooks: after the session");
}

const std::vector<std::string> kLogLines = {
    "runhooks: saved checkpoint for step 10", "runhooks: saved checkpoint for step 20",
    "runhooks: saved checkpoint for step 30"};

ProgressBarHook<runhooks::Keys<Loss>, ManualClock> terminal_bar() {
  // Neither `terminal` nor a stream: the bar finds by itself that stderr is a terminal.
  return ProgressBarHook<runhooks::Keys<Loss>, ManualClock>(
      runhooks::keys<Loss>, {.redraws_per_sec = 10.0, .width = 10}, ManualClock(0.0));
}

}  // namespace

TEST_CASE("ProgressBarHook on a terminal: a line of the default log sink erases the bar, which is "
          "drawn again below it") {
  const std::string bytes = run_on_terminal([] { train_and_log(terminal_bar()); });
  std::size_t from = check_alone(bytes, "I runhooks: before the first step\n", 0);
  from = check_between_bars(bytes, "I " + kLogLines[0] + "\n", from);
  from = check_between_bars(bytes, "W " + kLogLines[1] + "\n", from);
  from = check_between_bars(bytes, "I " + kLogLines[2] + "\n", from);
  check_alone(bytes, "I runhooks: after the session\n", from);
  // What the terminal shows: each log line whole on its own line, the bar only at the bottom.
  const auto rows = screen(bytes);
  INFO("the child wrote: " << bytes);
  REQUIRE(rows.size() == 6);
  CHECK(rows[0] == "I runhooks: before the first step");
  CHECK(rows[1] == "I " + kLogLines[0]);
  CHECK(rows[2] == "W " + kLogLines[1]);
  CHECK(rows[3] == "I " + kLogLines[2]);
  CHECK(rows[4].starts_with("40/40 [==========] 100%  "));
  CHECK(rows[4].ends_with("  loss=0.3902"));
  CHECK(rows[5] == "I runhooks: after the session");
}

TEST_CASE("ProgressBarHook on a terminal: a program's own log sink gets the same treatment") {
  const std::string bytes = run_on_terminal([] {
    runhooks::set_log_sink([](Severity, std::string_view line) {
      // To stdout, the same terminal as the bar's stderr; stdout is line-buffered there.
      std::printf("[train] %.*s\n", static_cast<int>(line.size()), line.data());
    });
    train_and_log(terminal_bar());
  });
  std::size_t from = check_alone(bytes, "[train] runhooks: before the first step\n", 0);
  for (const std::string& line : kLogLines) from = check_between_bars(bytes, "[train] " + line + "\n", from);
  check_alone(bytes, "[train] runhooks: after the session\n", from);
  const auto rows = screen(bytes);
  INFO("the child wrote: " << bytes);
  REQUIRE(rows.size() == 6);
  for (std::size_t i = 0; i < kLogLines.size(); ++i) CHECK(rows[i + 1] == "[train] " + kLogLines[i]);
  CHECK(rows[4].starts_with("40/40 [==========] 100%  "));
}

TEST_CASE("ProgressBarHook on a terminal: log lines from another thread while the bar redraws at "
          "every step") {
  constexpr int kLines = 200;
  const std::string bytes = run_on_terminal([] {
    std::atomic<bool> started{false};
    std::thread logger;
    {
      runhooks::MonitoredSession session{
          Backend{}, runhooks::StopAtStepHook({.last_step = 20000}),
          ProgressBarHook{runhooks::keys<Loss>, {.redraws_per_sec = 1000.0, .width = 20},
                          ManualClock(0.0)}};
      runhooks::link_hooks(session);
      session.run();  // the bar is drawn
      logger = std::thread([&] {
        started = true;
        for (int i = 0; i < kLines; ++i)
          runhooks::log(Severity::info, "runhooks: background line " + std::to_string(i));
      });
      while (!started) std::this_thread::yield();
      while (!session.should_stop()) {
        session.run();
        session.hook<1>().clock().advance(0.001);  // a redraw at every step
        if (session.raw_session().step == 19000) logger.join();  // the lines land while it draws
      }
      session.close();
    }
  });
  std::size_t from = 0;
  for (int i = 0; i < kLines; ++i)
    from = check_between_bars(bytes, "I runhooks: background line " + std::to_string(i) + "\n", from);
  const auto rows = screen(bytes);
  REQUIRE(rows.size() == static_cast<std::size_t>(kLines) + 1);
  for (int i = 0; i < kLines; ++i)
    CHECK(rows[static_cast<std::size_t>(i)] == "I runhooks: background line " + std::to_string(i));
  CHECK(rows.back().starts_with("20000/20000 [===================="));
}

TEST_CASE("ProgressBarHook in plain mode on a terminal: log lines get no escape codes") {
  const std::string bytes = run_on_terminal([] {
    train_and_log(ProgressBarHook<runhooks::Keys<Loss>, ManualClock>(
        runhooks::keys<Loss>, {.plain_line_secs = 0.5, .terminal = false}, ManualClock(0.0)));
  });
  CHECK(bytes.find('\x1b') == std::string::npos);
  CHECK(bytes.find('\r') == std::string::npos);
  std::size_t from = check_alone(bytes, "I runhooks: before the first step\n", 0);
  for (const std::string& line : kLogLines)
    from = check_alone(bytes, (line.ends_with("20") ? "W " : "I ") + line + "\n", from);
  check_alone(bytes, "I runhooks: after the session\n", from);
  const auto rows = screen(bytes);
  CHECK(rows[1].starts_with("progress: step 1/40 (2%)"));
  CHECK(rows.back() == "I runhooks: after the session");
}

namespace {

// Issue 30: `while (!session.should_stop()) session.run();` and a printf right after it, the
// session still open (its destructor calls end()). `stop` ends the loop: a StopAtStepHook placed
// after the bar (whose after_run cannot see the stop), a later hook, or the caller.
enum class StopBy { later_hook, caller, caller_with_inner_session };

void loop_then_printf(StopBy stop) {
  runhooks::MonitoredSession session{
      Backend{},
      ProgressBarHook<runhooks::Keys<Loss>, ManualClock>(
          runhooks::keys<Loss>, {.redraws_per_sec = 10.0, .width = 10}, ManualClock(0.0)),
      runhooks::StopAtStepHook({.last_step = 40})};
  runhooks::link_hooks(session);
  while (!session.should_stop()) {
    session.run();
    session.hook<0>().clock().advance(0.05);
    const std::int64_t step = session.raw_session().step;
    if (stop == StopBy::caller_with_inner_session && step == 10) {
      // Another session's loop ends: not this bar's.
      runhooks::MonitoredSession inner{Backend{}, runhooks::StopAtStepHook({.last_step = 3})};
      while (!inner.should_stop()) inner.run();
    }
    if (stop != StopBy::later_hook && step == 25) session.request_stop();
  }
  std::printf("ended at step %lld\n", static_cast<long long>(session.raw_session().step));
}

void check_clean_end(const std::string& bytes, std::string_view bar_start, std::string_view ended) {
  INFO("the child wrote: " << bytes);
  const auto rows = screen(bytes);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].starts_with(bar_start));
  CHECK(rows[1] == ended);
  // Nothing after the program's line: the bar's final draw came before it, and end() drew
  // nothing more.
  CHECK(bytes.ends_with("\n" + std::string(ended) + "\n"));
}

}  // namespace

TEST_CASE("ProgressBarHook on a terminal: the loop's end ends the bar's line, before the program "
          "prints (issue 30)") {
  SUBCASE("a later hook stops the loop") {
    const std::string bytes = run_on_terminal([] { loop_then_printf(StopBy::later_hook); });
    check_clean_end(bytes, "40/40 [==========] 100%  ", "ended at step 40");
    CHECK(screen(bytes)[0].ends_with("  loss=0.3902"));  // the keys read as the loop ended
  }
  SUBCASE("the caller stops the loop") {
    const std::string bytes = run_on_terminal([] { loop_then_printf(StopBy::caller); });
    check_clean_end(bytes, "25/40 [======>...]  62%  ", "ended at step 25");
  }
  SUBCASE("another session's loop ending leaves the bar alone") {
    const std::string bytes =
        run_on_terminal([] { loop_then_printf(StopBy::caller_with_inner_session); });
    check_clean_end(bytes, "25/40 [======>...]  62%  ", "ended at step 25");
  }
}
