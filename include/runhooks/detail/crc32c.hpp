// Defines `runhooks::detail::crc32c` (CRC-32C, Castagnoli, computed by Boost.CRC) and
// TensorFlow's masked form of it, which frame the records of a TensorFlow event file.
#pragma once

#if !__has_include(<boost/crc.hpp>)
#error "runhooks: TensorBoard event files need Boost.CRC (<boost/crc.hpp>, part of the Boost headers); Hana alone (the hana wrap) does not provide it"
#endif

#include <boost/crc.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace runhooks::detail {

// TFRecord uses Castagnoli's polynomial, not zlib's CRC-32: initial value and final XOR all
// ones, input and output reflected. Boost's table-driven loop is as fast as the hand-written
// one it replaced (measured on 1 KiB and 64 KiB buffers, issue 10).
using Crc32cComputer = boost::crc_optimal<32, 0x1EDC6F41U, 0xFFFFFFFFU, 0xFFFFFFFFU, true, true>;

inline std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  Crc32cComputer crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

inline std::uint32_t crc32c(std::string_view bytes) noexcept {
  return crc32c(std::as_bytes(std::span(bytes.data(), bytes.size())));
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

}  // namespace runhooks::detail
