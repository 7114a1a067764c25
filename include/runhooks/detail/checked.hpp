// Checks on the numbers users hand to runhooks: durations that must be finite and in range, and
// step arithmetic that saturates instead of overflowing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace runhooks::detail {

// The longest duration any option accepts: about 31.7 years, far below the range of
// std::chrono::steady_clock::duration (nanoseconds in 64 bits, about 292 years), so a deadline
// computed from it never overflows.
inline constexpr double max_duration_secs = 1e9;

inline std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

[[noreturn]] inline void throw_bad_secs(const char* option, double value, double min,
                                        bool min_exclusive) {
  throw std::invalid_argument("runhooks: " + std::string(option) +
                              " must be a number of seconds " +
                              (min_exclusive ? "greater than " : "at least ") +
                              format_number(min) + " and at most " +
                              format_number(max_duration_secs) + ", got " +
                              format_number(value) + ".");
}

// Throws std::invalid_argument naming the option and its value unless `value` is finite, at
// least `min` (or above it when min_exclusive) and at most max_duration_secs. In a constant
// expression (options declared constexpr) the same mistake is a compile error whose notes show
// this call with the option's name and value.
constexpr double checked_secs(const char* option, double value, double min = 0.0,
                              bool min_exclusive = false) {
  const bool below = min_exclusive ? !(value > min) : !(value >= min);  // NaN fails both
  if (below || !(value <= max_duration_secs)) {
    if (std::is_constant_evaluated())
      throw "runhooks: a duration option is out of range: see the option and value above";
    throw_bad_secs(option, value, min, min_exclusive);
  }
  return value;
}

// a + b for steps, saturating at the limits of std::int64_t instead of overflowing (UB).
constexpr std::int64_t saturating_add(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  if (b > 0 && a > max - b) return max;
  if (b < 0 && a < min - b) return min;
  return a + b;
}

// a - b, saturating likewise.
constexpr std::int64_t saturating_sub(std::int64_t a, std::int64_t b) noexcept {
  constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
  constexpr std::int64_t min = std::numeric_limits<std::int64_t>::min();
  if (b < 0 && a > max + b) return max;
  if (b > 0 && a < min + b) return min;
  return a - b;
}

}  // namespace runhooks::detail
