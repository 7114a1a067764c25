// The protocol-buffer wire format (protobuf's "Encoding" guide), the part event files need:
// varints, keys, little-endian fixed-width fields, length-delimited fields, proto3 doubles.
#pragma once

#include <runhooks/detail/config.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace runhooks::detail {

// Protocol-buffer wire types (protobuf "Encoding" guide); only those the event file needs.
enum class WireType : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

inline void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80U) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(value | 0x80U)));
    value >>= 7;
  }
  out.push_back(static_cast<char>(static_cast<std::uint8_t>(value)));
}

inline constexpr std::size_t varint_size(std::uint64_t value) noexcept {
  std::size_t size = 1;
  for (; value >= 0x80U; value >>= 7) ++size;
  return size;
}

inline void put_key(std::string& out, std::uint32_t field, WireType type) {
  put_varint(out, (std::uint64_t{field} << 3) | static_cast<std::uint8_t>(type));
}

// Fixed-width fields and the TFRecord header are little-endian whatever the host is.
inline void store_little_endian(char* out, std::uint64_t value, int bytes) noexcept {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>(static_cast<std::uint8_t>(value >> (8 * i)));
}

inline void put_little_endian(std::string& out, std::uint64_t value, int bytes) {
  char buffer[8];
  store_little_endian(buffer, value, bytes);
  out.append(buffer, static_cast<std::size_t>(bytes));
}

inline void put_length_delimited(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, WireType::length_delimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// A proto3 double: omitted when its bits are zero (0.0, not -0.0), as protobuf does.
inline void put_double(std::string& out, std::uint32_t field, double value) {
  const auto bits = std::bit_cast<std::uint64_t>(value);
  if (bits == 0) return;
  put_key(out, field, WireType::fixed64);
  put_little_endian(out, bits, 8);
}

inline void put_packed_doubles(std::string& out, std::uint32_t field, std::span<const double> values) {
  if (values.empty()) return;
  put_key(out, field, WireType::length_delimited);
  put_varint(out, 8 * values.size());
  for (const double v : values) put_little_endian(out, std::bit_cast<std::uint64_t>(v), 8);
}

}  // namespace runhooks::detail
