// How hooks print a fetched value in a log line: as numpy's str() prints a scalar, which is what
// TensorFlow's LoggingTensorHook shows ("loss = 0.1", "step = 42", "ok = True").
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace runhooks::detail {

template <class T>
concept formattable_value =
    std::is_arithmetic_v<T> || std::convertible_to<const T&, std::string_view>;

// numpy's str() of a float32 or float64 scalar: the shortest text that reads back as the same
// value, positional for 0 and for 1e-4 <= |x| < 1e16 (float32: < 1e6) with at least one decimal
// ("42.0"), scientific otherwise ("1e-05", "1.5e+16"), and nan, inf, -inf.
template <std::floating_point T>
std::string format_float(T value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  char text[64];
  // numpy compares in double: the float32 nearest 1e-4 is below it, and prints as "1e-04".
  const double magnitude = std::fabs(static_cast<double>(value));
  const double max_positional = sizeof(T) == sizeof(float) ? 1e6 : 1e16;
  const bool positional = magnitude == 0.0 || (magnitude >= 1e-4 && magnitude < max_positional);
  const auto [end, error] =
      std::to_chars(text, text + sizeof text, value,
                    positional ? std::chars_format::fixed : std::chars_format::scientific);
  if (error != std::errc()) return "?";
  std::string out(text, end);
  if (positional && out.find('.') == std::string::npos) out += ".0";
  return out;
}

template <formattable_value T>
std::string format_value(const T& value) {
  if constexpr (std::is_same_v<T, bool>)
    return value ? "True" : "False";
  else if constexpr (std::is_floating_point_v<T>)
    return format_float(value);
  else if constexpr (std::is_integral_v<T>)
    return std::to_string(value);
  else
    return std::string(std::string_view(value));
}

}  // namespace runhooks::detail
