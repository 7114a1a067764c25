// Where the built-in hooks' log lines go: stderr by default, or a sink the program installs.
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <cstdio>
#include <string_view>

namespace runhooks {

enum class Severity { info, warning };

// A log sink receives one finished line, without its trailing newline.
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
}  // namespace detail

// Replaces the sink and returns the previous one; nullptr restores stderr. Thread-safe.
inline LogSink set_log_sink(LogSink sink) noexcept {
  return detail::log_sink_slot().exchange(sink != nullptr ? sink : &detail::stderr_sink);
}

inline void log(Severity severity, std::string_view line) {
  detail::log_sink_slot().load(std::memory_order_acquire)(severity, line);
}

}  // namespace runhooks
