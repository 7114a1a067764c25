// Strict UTF-8, the check protobuf's parsers make of every `string` field (and so TensorBoard's
// reader of every tag and path in an event file), and the escape of the bytes that fail it.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace runhooks::detail {

// The length of the well-formed UTF-8 sequence at text[at], or 0 if the bytes there do not
// begin one: Unicode's table 3-7 (RFC 3629), so overlong forms, surrogates (U+D800-DFFF) and
// code points above U+10FFFF are refused, as by protobuf (upb's utf8_range) and Python's codec.
constexpr std::size_t utf8_sequence_size(std::string_view text, std::size_t at) noexcept {
  const auto byte = [&](std::size_t i) -> std::uint8_t {
    return at + i < text.size() ? static_cast<std::uint8_t>(text[at + i]) : 0;
  };
  const auto in = [](std::uint8_t b, std::uint8_t low, std::uint8_t high) {
    return b >= low && b <= high;
  };
  const std::uint8_t lead = byte(0);
  if (lead < 0x80) return at < text.size() ? 1 : 0;
  if (in(lead, 0xC2, 0xDF)) return in(byte(1), 0x80, 0xBF) ? 2 : 0;
  if (in(lead, 0xE0, 0xEF)) {
    const std::uint8_t low = lead == 0xE0 ? 0xA0 : 0x80;
    const std::uint8_t high = lead == 0xED ? 0x9F : 0xBF;
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(lead, 0xF0, 0xF4)) {
    const std::uint8_t low = lead == 0xF0 ? 0x90 : 0x80;
    const std::uint8_t high = lead == 0xF4 ? 0x8F : 0xBF;
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xBF) && in(byte(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;  // a continuation byte, C0, C1 or F5-FF
}

// The offset of the first byte that is not part of a well-formed sequence, or npos when all of
// `text` is UTF-8. ASCII costs one compare a byte.
constexpr std::size_t invalid_utf8_at(std::string_view text) noexcept {
  for (std::size_t at = 0; at < text.size();) {
    if (static_cast<std::uint8_t>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    const std::size_t size = utf8_sequence_size(text, at);
    if (size == 0) return at;
    at += size;
  }
  return std::string_view::npos;
}

constexpr bool is_utf8(std::string_view text) noexcept {
  return invalid_utf8_at(text) == std::string_view::npos;
}

// `text` with every byte that is not part of a well-formed sequence written as `\xNN` (two
// lowercase hex digits): Python's bytes.decode("utf-8", "backslashreplace"), whose result
// `os.fsdecode` users know for such file names. Valid UTF-8 comes back unchanged.
inline std::string escape_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t size = utf8_sequence_size(text, at);
    if (size == 0) {
      constexpr char digits[] = "0123456789abcdef";
      const auto b = static_cast<std::uint8_t>(text[at]);
      out += "\\x";
      out += digits[b >> 4];
      out += digits[b & 0x0F];
      ++at;
    } else {
      out.append(text.substr(at, size));
      at += size;
    }
  }
  return out;
}

}  // namespace runhooks::detail
