// Defines `runhooks::detail::crc32c` (CRC-32C, Castagnoli) and TensorFlow's masked form of it,
// which frame the records of a TensorFlow event file.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace runhooks::detail {

// Reflected polynomial of CRC-32C: TFRecord uses Castagnoli, not zlib's CRC-32.
inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78U;

// Built at compile time, so the header needs no run-time initialisation and no static storage
// that would differ between translation units.
inline constexpr std::array<std::uint32_t, 256> crc32c_table = [] {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1U) != 0 ? (crc >> 1) ^ crc32c_polynomial : crc >> 1;
    }
    table[i] = crc;
  }
  return table;
}();

constexpr std::uint32_t crc32c_update(std::uint32_t state, std::uint8_t byte) noexcept {
  return crc32c_table[(state ^ byte) & 0xFFU] ^ (state >> 8);
}

// `crc32c_extend(crc32c(a), b) == crc32c(a + b)`, so a record can be checksummed in pieces.
constexpr std::uint32_t crc32c_extend(std::uint32_t crc, std::string_view bytes) noexcept {
  std::uint32_t state = ~crc;
  for (const char c : bytes) {
    state = crc32c_update(state, static_cast<std::uint8_t>(c));
  }
  return ~state;
}

constexpr std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> bytes) noexcept {
  std::uint32_t state = ~crc;
  for (const std::byte b : bytes) {
    state = crc32c_update(state, static_cast<std::uint8_t>(b));
  }
  return ~state;
}

// Both overloads exist because neither argument type converts to the other without a
// reinterpret_cast, which would rule out constant evaluation.
constexpr std::uint32_t crc32c(std::string_view bytes) noexcept { return crc32c_extend(0, bytes); }

constexpr std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  return crc32c_extend(0, bytes);
}

// TFRecord stores CRCs masked, because the CRC of a string that embeds its own CRC is weak
// (tensorflow/core/lib/hash/crc32c.h). The rotation and the constant are TensorFlow's.
inline constexpr std::uint32_t crc32c_mask_delta = 0xA282EAD8U;

constexpr std::uint32_t masked_crc32c(std::uint32_t crc) noexcept {
  return ((crc >> 15) | (crc << 17)) + crc32c_mask_delta;
}

constexpr std::uint32_t unmasked_crc32c(std::uint32_t masked) noexcept {
  const std::uint32_t rotated = masked - crc32c_mask_delta;
  return (rotated >> 17) | (rotated << 15);
}

static_assert(crc32c("123456789") == 0xE3069283U, "CRC-32C check value (RFC 3720 catalogue)");

}  // namespace runhooks::detail
