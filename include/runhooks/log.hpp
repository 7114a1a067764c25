// Where the built-in hooks' log lines go: stderr by default, or a sink the program installs; and
// how a log line shares a terminal with a live progress bar.
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <cstdio>
#include <string_view>

namespace runhooks {

enum class Severity { info, warning };

// A log sink receives one finished line, without its trailing newline. It must not call
// runhooks::log, and what it writes should be flushed when it returns (stderr is unbuffered,
// stdout on a terminal is line-buffered: a line that ends with '\n' is).
using LogSink = void (*)(Severity, std::string_view line);

namespace detail {
inline void stderr_sink(Severity severity, std::string_view line) {
  std::fprintf(stderr, "%s %.*s\n", severity == Severity::info ? "I" : "W",
               static_cast<int>(line.size()), line.data());
}
inline std::atomic<LogSink>& log_sink_slot() noexcept {
  static std::atomic<LogSink> sink{&stderr_sink};
  return sink;
}

// The live line: the one line that a display keeps at the bottom of a terminal and redraws in
// place (a ProgressBarHook on a terminal). While one is registered, log() erases it with
// "\r\x1b[K" on its stream, calls the sink, and has the display draw it again below the log
// line, as tqdm.write does. One slot for the process: the display that drew last holds it.
// When a session's loop ends (live_line_loop_ends), the display may end its line at once, so
// that what the program prints after the loop starts on a line of its own.
struct LiveLine {
  std::FILE* stream = nullptr;
  void (*redraw)(const void* owner) = nullptr;  // writes the line again; called under the lock
  const void* owner = nullptr;                  // nullptr: no live line
  // The loop of the session whose backend is `backend` ends: a display of that session ends
  // its line (any other ignores it). Called without the lock; may be nullptr.
  void (*loop_ends)(const void* owner, const void* backend) = nullptr;
};

// Serializes log lines with the live line's draws, so that neither lands inside the other.
// Held by log() around erase + sink + redraw, and by a display around each draw (a bar draws
// at most redraws_per_sec times a second, never on a silent step). A futex-style lock on
// std::atomic's C++20 wait: the core header includes no thread machinery (<mutex>).
class LiveLineLock {
 public:
  LiveLineLock() noexcept {
    while (state().exchange(1, std::memory_order_acquire) != 0)
      state().wait(1, std::memory_order_relaxed);
  }
  ~LiveLineLock() {
    state().store(0, std::memory_order_release);
    state().notify_one();
  }
  LiveLineLock(const LiveLineLock&) = delete;
  LiveLineLock& operator=(const LiveLineLock&) = delete;

  const LiveLine& line() const noexcept { return slot(); }
  // `line.owner` becomes the live line (a draw on a terminal).
  void show(const LiveLine& line) noexcept { slot() = line; }
  // No live line any more, if `owner` held it (the bar's final draw, its destructor).
  void hide(const void* owner) noexcept {
    if (slot().owner == owner) slot() = LiveLine{};
  }
  // A display moved while live: the slot follows it.
  void move(const void* from, const void* to) noexcept {
    if (slot().owner == from) slot().owner = to;
  }

 private:
  static std::atomic<int>& state() noexcept {
    static std::atomic<int> value{0};
    return value;
  }
  static LiveLine& slot() noexcept {
    static LiveLine line;
    return line;
  }
};
// A session's loop ends: a hook or the caller asked it to stop (never on the per-step path). The
// live line's display ends its line if it belongs to the session of `backend`. On the thread
// that runs the loop, which is the one that draws the display; what it throws is dropped (the
// display's end() draws its line as it did before).
inline void live_line_loop_ends(const void* backend) noexcept {
  LiveLine live;
  {
    LiveLineLock lock;
    live = lock.line();
  }
  if (live.owner == nullptr || live.loop_ends == nullptr) return;
  try {
    live.loop_ends(live.owner, backend);
  } catch (...) {
  }
}
}  // namespace detail

// Replaces the sink and returns the previous one; nullptr restores stderr. Thread-safe.
inline LogSink set_log_sink(LogSink sink) noexcept {
  return detail::log_sink_slot().exchange(sink != nullptr ? sink : &detail::stderr_sink);
}

// Writes one line through the sink. Thread-safe; lines never interleave with each other or with
// a live progress bar, which is erased before the line and drawn again after it.
inline void log(Severity severity, std::string_view line) {
  const LogSink sink = detail::log_sink_slot().load(std::memory_order_acquire);
  detail::LiveLineLock lock;
  const detail::LiveLine live = lock.line();
  if (live.owner != nullptr) {
    std::fputs("\r\x1b[K", live.stream);
    std::fflush(live.stream);  // erased before the sink writes, whatever stream it writes to
  }
  sink(severity, line);
  if (live.owner != nullptr) live.redraw(live.owner);
}

}  // namespace runhooks
