// How hooks print a fetched value in a log line: as numpy's str() prints it, which is what
// TensorFlow's LoggingTensorHook shows ("loss = 0.1", "step = 42", "ok = True",
// "weights = [0.5  1.25 2.  ]").
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <ranges>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

namespace runhooks::detail {

template <class T>
concept formattable_value =
    std::is_arithmetic_v<T> || std::convertible_to<const T&, std::string_view>;

// An element numpy has a dtype for: bool, an integer, float32 or float64.
template <class T>
concept numpy_element =
    std::integral<T> || std::same_as<T, float> || std::same_as<T, double>;

// A 1-D array of numbers: std::vector<T>, std::array<T, N>, std::span<const T>, ...
template <class R>
concept formattable_array =
    !std::convertible_to<const R&, std::string_view> && std::ranges::forward_range<const R> &&
    std::ranges::sized_range<const R> && numpy_element<std::ranges::range_value_t<const R>>;

// What LoggingTensorHook's default line prints: a scalar, a string or a 1-D array.
template <class T>
concept loggable_value = formattable_value<T> || formattable_array<T>;

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

// numpy's array printing (numpy/_core/arrayprint.py with its default print options: precision
// 8, floatmode 'maxprec', threshold 1000, edgeitems 3, linewidth 75) for one dimension, as
// numpy 2.2 and later print it (checked against 2.4.6). Older numpy differs for float32 only:
// its scientific cutoff is 1e8, not 1e6, and it compares float32 values in double.
namespace numpy_array {

inline constexpr std::size_t precision = 8;    // fractional digits at most
inline constexpr std::size_t threshold = 1000;  // more elements than this: summarised
inline constexpr std::size_t edge_items = 3;    // elements shown at each end when summarised
inline constexpr std::size_t line_width = 75;

// One finite float as numpy's first pass prints it (Dragon4, unique, at most `precision`
// fractional digits, trim '.'): sign and integer part, fractional digits (may be empty), and in
// scientific mode the exponent with its sign ("-05").
struct FloatParts {
  std::string integer, fraction, exponent;
};

// With `digits`, exactly that many fractional digits: the exact value rounded to them.
template <std::floating_point T>
FloatParts float_parts(T value, bool scientific, std::size_t digits = 0) {
  const auto format = scientific ? std::chars_format::scientific : std::chars_format::fixed;
  char text[400];
  auto result = digits ? std::to_chars(text, text + sizeof text, value, format,
                                       static_cast<int>(digits))
                      : std::to_chars(text, text + sizeof text, value, format);  // shortest
  std::string s(text, result.ptr);
  auto split = [](const std::string& str) {
    FloatParts parts;
    const std::size_t e = str.find('e');
    const std::string mantissa = str.substr(0, e);
    if (e != std::string::npos) parts.exponent = str.substr(e + 1);
    const std::size_t dot = mantissa.find('.');
    parts.integer = mantissa.substr(0, dot);
    if (dot != std::string::npos) parts.fraction = mantissa.substr(dot + 1);
    return parts;
  };
  FloatParts parts = split(s);
  if (!digits && parts.fraction.size() > precision) {
    // More digits than the precision: the exact value rounded (half to even) to it, then the
    // trailing zeros trimmed, as Dragon4's cutoff does.
    result = std::to_chars(text, text + sizeof text, value, format, static_cast<int>(precision));
    parts = split(std::string(text, result.ptr));
    while (!parts.fraction.empty() && parts.fraction.back() == '0') parts.fraction.pop_back();
  }
  return parts;
}

// numpy's FloatingFormat: every element the same width, decimal points aligned.
template <std::floating_point T>
std::vector<std::string> format_floats(const std::vector<T>& values) {
  // Scientific when a non-zero finite magnitude is >= 1e8 (float32: 1e6), < 1e-4, or the largest
  // is over 1000 times the smallest; numpy 2 compares in the element type (NEP 50).
  bool any_non_zero = false, any_finite = false, negative_inf = false;
  T max_abs = 0, min_abs = 0;
  for (const T v : values) {
    if (std::isinf(v) && v < 0) negative_inf = true;
    if (!std::isfinite(v)) continue;
    any_finite = true;
    if (v == 0) continue;
    const T a = std::fabs(v);
    max_abs = any_non_zero ? std::max(max_abs, a) : a;
    min_abs = any_non_zero ? std::min(min_abs, a) : a;
    any_non_zero = true;
  }
  const T exp_cutoff = std::same_as<T, float> ? T(1e6) : T(1e8);
  const bool scientific = any_non_zero && (max_abs >= exp_cutoff || min_abs < T(0.0001) ||
                                           max_abs / min_abs > T(1000));

  std::vector<FloatParts> parts(values.size());
  std::size_t pad_left = 0, pad_right = 0, digits = 0, exp_size = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    parts[i] = float_parts(values[i], scientific);
    pad_left = std::max(pad_left, parts[i].integer.size());
    digits = std::max(digits, parts[i].fraction.size());
    if (scientific) exp_size = std::max(exp_size, parts[i].exponent.size() - 1);
  }
  pad_right = scientific ? exp_size + 2 + digits : digits;
  if (!any_finite) pad_left = pad_right = 0;
  if (!std::ranges::all_of(values, [](T v) { return std::isfinite(v); })) {
    // Non-finite values: room for "nan", "inf" or "-inf" right-aligned in the same width.
    const std::size_t offset = pad_right + 1;
    const std::size_t inf_len = 3 + (negative_inf ? 1 : 0);
    if (3 > offset) pad_left = std::max(pad_left, 3 - offset);
    if (inf_len > offset) pad_left = std::max(pad_left, inf_len - offset);
  }

  std::vector<std::string> words;
  words.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const T v = values[i];
    std::string word;
    if (!std::isfinite(v)) {
      const std::string text = std::isnan(v) ? "nan" : (v < 0 ? "-inf" : "inf");
      const std::size_t width = pad_left + pad_right + 1;
      word = std::string(width > text.size() ? width - text.size() : 0, ' ') + text;
    } else {
      FloatParts p = parts[i];
      // Scientific: every mantissa gets `digits` fractional digits, the value's own (Dragon4's
      // min_digits with unique: a float32's exact digits past its shortest form, not zeros).
      if (scientific && p.fraction.size() < digits)
        p = float_parts(v, /*scientific=*/true, digits);
      word.assign(pad_left - p.integer.size(), ' ');
      word += p.integer;
      word += '.';
      word += p.fraction;
      if (scientific) {
        word += 'e';
        word += p.exponent[0];
        word.append(exp_size - (p.exponent.size() - 1), '0');
        word.append(p.exponent, 1);
      } else {
        word.append(digits - p.fraction.size(), ' ');
      }
    }
    words.push_back(std::move(word));
  }
  return words;
}

// numpy's IntegerFormat (right-aligned to the longest) and BoolFormat (" True", "False").
template <std::integral T>
std::vector<std::string> format_integers(const std::vector<T>& values) {
  std::vector<std::string> words;
  words.reserve(values.size());
  std::size_t width = 0;
  for (const T v : values) {
    if constexpr (std::same_as<T, bool>)
      words.push_back(v ? " True" : "False");
    else
      words.push_back(std::to_string(+v));
    width = std::max(width, words.back().size());
  }
  for (std::string& word : words) word.insert(0, width - word.size(), ' ');
  return words;
}

// numpy's _formatArray for one dimension: "[" + words separated by spaces + "]", wrapped before
// a word that would pass line_width - 1 columns, continuation lines indented by one space; "..."
// stands for the middle when summarised.
inline std::string wrap(const std::vector<std::string>& words, bool summarised) {
  const std::string prefix = " ";
  const std::size_t width = line_width - 1;  // room for the "]"
  std::string s, line = prefix;
  auto extend = [&](const std::string& word) {
    if (line.size() + word.size() > width && line.size() > prefix.size()) {
      const std::size_t last = line.find_last_not_of(' ');
      s += line.substr(0, last == std::string::npos ? 0 : last + 1);
      s += '\n';
      line = prefix;
    }
    line += word;
  };
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (summarised && i == edge_items) {
      extend("...");
      line += ' ';
    }
    extend(words[i]);
    if (i + 1 < words.size()) line += ' ';
  }
  s += line;
  return "[" + s.substr(prefix.size()) + "]";
}

}  // namespace numpy_array

// numpy's str() of a 1-D array: "[1.  2.5 3. ]", "[ -1  10 100]", "[ True False]",
// "[1.e-05 1.e+00]", "[   0    1    2 ...  998  999 1000]". Above 1000 elements only the first
// and last 3 are printed, and they alone decide the format (as numpy does).
template <formattable_array R>
std::string format_array(const R& range) {
  using T = std::ranges::range_value_t<const R>;
  const std::size_t size = static_cast<std::size_t>(std::ranges::size(range));
  if (size == 0) return "[]";
  const bool summarised = size > numpy_array::threshold;
  std::vector<T> shown;
  shown.reserve(summarised ? 2 * numpy_array::edge_items : size);
  std::size_t i = 0;
  for (const auto& v : range) {
    if (!summarised || i < numpy_array::edge_items || i >= size - numpy_array::edge_items)
      shown.push_back(static_cast<T>(v));
    ++i;
  }
  if constexpr (std::floating_point<T>)
    return numpy_array::wrap(numpy_array::format_floats(shown), summarised);
  else
    return numpy_array::wrap(numpy_array::format_integers(shown), summarised);
}

template <loggable_value T>
std::string format_value(const T& value) {
  if constexpr (std::is_same_v<T, bool>)
    return value ? "True" : "False";
  else if constexpr (std::is_floating_point_v<T>)
    return format_float(value);
  else if constexpr (std::is_integral_v<T>)
    return std::to_string(value);
  else if constexpr (formattable_value<T>)
    return std::string(std::string_view(value));
  else
    return format_array(value);
}

}  // namespace runhooks::detail
