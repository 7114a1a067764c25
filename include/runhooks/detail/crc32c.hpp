// Defines `runhooks::detail::crc32c` (CRC-32C, Castagnoli) with the CPU's instruction where it
// has one, chosen once at run time, Boost.CRC elsewhere; and TensorFlow's masked form of it,
// which frames the records of a TensorFlow event file.
#pragma once

#if !__has_include(<boost/crc.hpp>)
#error "runhooks: TensorBoard event files need Boost.CRC (<boost/crc.hpp>, part of the Boost headers); Hana alone (the hana wrap) does not provide it"
#endif

#include <boost/crc.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

// The instruction, where the compiler can emit it in one function of a translation unit built
// for the baseline ISA: x86-64 (SSE4.2 `crc32`, detected at run time), ARMv8 when the target has
// the CRC32 extension (-march=armv8-a+crc, ARMv8.1 and later, Apple silicon).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RUNHOOKS_DETAIL_CRC32C_SSE42 1  // GCC's and Clang's builtins: no <nmmintrin.h> to parse
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define RUNHOOKS_DETAIL_CRC32C_ARMV8 1
#endif

namespace runhooks::detail {

// TFRecord uses Castagnoli's polynomial, not zlib's CRC-32: initial value and final XOR all
// ones, input and output reflected. The portable path and the reference of the tests.
using Crc32cComputer = boost::crc_optimal<32, 0x1EDC6F41U, 0xFFFFFFFFU, 0xFFFFFFFFU, true, true>;

// Continues a reflected Boost CRC (init and final XOR all ones) from the checksum of the bytes
// before: Boost takes the interim remainder unreflected.
template <class Computer>
std::uint32_t boost_crc_extend(std::uint32_t crc, const void* data, std::size_t size) noexcept {
  std::uint32_t bits = ~crc;  // reversed in five swaps
  bits = ((bits >> 1) & 0x55555555U) | ((bits & 0x55555555U) << 1);
  bits = ((bits >> 2) & 0x33333333U) | ((bits & 0x33333333U) << 2);
  bits = ((bits >> 4) & 0x0F0F0F0FU) | ((bits & 0x0F0F0F0FU) << 4);
  bits = ((bits >> 8) & 0x00FF00FFU) | ((bits & 0x00FF00FFU) << 8);
  Computer computer((bits >> 16) | (bits << 16));
  computer.process_bytes(data, size);
  return computer.checksum();
}

// How a CRC-32C is computed: Boost's table loop (0.2-0.3 GB/s) or the CPU's instruction, three
// independent streams at a time (10-20 GB/s on an x86-64 server: 64 MiB in 3.5 ms, as fast as
// memory delivers it; bench/checkpoint_write.cpp).
enum class Crc32cEngine { portable, sse42, armv8 };

// a * b modulo the polynomial, both reflected (bit 31 is x^0): Mark Adler's multmodp (zlib).
// Branch-free, since the run-time path calls it twice per 192 KiB.
constexpr std::uint32_t crc32c_multiply(std::uint32_t a, std::uint32_t b) noexcept {
  std::uint32_t product = 0;
  for (int i = 0; i < 32; ++i, a <<= 1) {
    product ^= b & (0U - (a >> 31));
    b = (b >> 1) ^ (0x82F63B78U & (0U - (b & 1U)));
  }
  return product;
}

// x^(8 n) modulo the polynomial: multiplying a CRC register by it appends n zero bytes.
constexpr std::uint32_t crc32c_zeros_operator(std::size_t n) noexcept {
  std::uint32_t result = 1U << 31, square = 1U << 23;  // x^0, x^8
  for (; n != 0; n >>= 1) {
    if ((n & 1U) != 0) result = crc32c_multiply(result, square);
    square = crc32c_multiply(square, square);
  }
  return result;
}

// The streams' lengths, each with the operator that appends that many zeros: long ones for large
// arrays, short ones for the rest; a remainder shorter than three short streams is one stream.
// (Measured on 64 MiB: 16 KiB streams cost 15% more, from memory; 64 KiB ones reach its bandwidth.)
struct Crc32cStreams {
  std::size_t length;
  std::uint32_t shift;
};
inline constexpr Crc32cStreams crc32c_streams[] = {
    {64 * 1024, crc32c_zeros_operator(64 * 1024)},
    {4 * 1024, crc32c_zeros_operator(4 * 1024)},
};

#if defined(RUNHOOKS_DETAIL_CRC32C_SSE42)
// One instruction has 3 cycles of latency and a throughput of one per cycle, so three streams
// over adjacent thirds run three times as fast as one; the register of a stream is linear in the
// bytes it saw, so the three combine by appending zeros (a multiplication) and an XOR.
[[gnu::target("sse4.2")]] inline std::uint32_t crc32c_extend_sse42(std::uint32_t crc,
                                                                   const void* data,
                                                                   std::size_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto load = [](const unsigned char* at) {
    std::uint64_t word;
    std::memcpy(&word, at, sizeof word);
    return word;
  };
  std::uint64_t state = ~crc;
  for (const Crc32cStreams& streams : crc32c_streams) {
    const std::size_t length = streams.length;
    for (; size >= 3 * length; p += 3 * length, size -= 3 * length) {
      std::uint64_t second = 0, third = 0;
      for (std::size_t i = 0; i < length; i += 8) {
        state = __builtin_ia32_crc32di(state, load(p + i));  // _mm_crc32_u64
        second = __builtin_ia32_crc32di(second, load(p + length + i));
        third = __builtin_ia32_crc32di(third, load(p + 2 * length + i));
      }
      state = crc32c_multiply(streams.shift, static_cast<std::uint32_t>(state)) ^ second;
      state = crc32c_multiply(streams.shift, static_cast<std::uint32_t>(state)) ^ third;
    }
  }
  for (; size >= 8; p += 8, size -= 8) state = __builtin_ia32_crc32di(state, load(p));
  auto state32 = static_cast<std::uint32_t>(state);
  for (; size > 0; ++p, --size) state32 = __builtin_ia32_crc32qi(state32, *p);  // _mm_crc32_u8
  return ~state32;
}
#endif

#if defined(RUNHOOKS_DETAIL_CRC32C_ARMV8)
// The same three streams with ARMv8's crc32c instructions.
inline std::uint32_t crc32c_extend_armv8(std::uint32_t crc, const void* data,
                                         std::size_t size) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  const auto load = [](const unsigned char* at) {
    std::uint64_t word;
    std::memcpy(&word, at, sizeof word);
    return word;
  };
  std::uint32_t state = ~crc;
  for (const Crc32cStreams& streams : crc32c_streams) {
    const std::size_t length = streams.length;
    for (; size >= 3 * length; p += 3 * length, size -= 3 * length) {
      std::uint32_t second = 0, third = 0;
      for (std::size_t i = 0; i < length; i += 8) {
        state = __crc32cd(state, load(p + i));
        second = __crc32cd(second, load(p + length + i));
        third = __crc32cd(third, load(p + 2 * length + i));
      }
      state = crc32c_multiply(streams.shift, state) ^ second;
      state = crc32c_multiply(streams.shift, state) ^ third;
    }
  }
  for (; size >= 8; p += 8, size -= 8) state = __crc32cd(state, load(p));
  for (; size > 0; ++p, --size) state = __crc32cb(state, *p);
  return ~state;
}
#endif

// Whether this build and this CPU can use `engine`.
inline bool crc32c_engine_available(Crc32cEngine engine) noexcept {
  switch (engine) {
    case Crc32cEngine::portable: return true;
    case Crc32cEngine::sse42:
#if defined(RUNHOOKS_DETAIL_CRC32C_SSE42)
      __builtin_cpu_init();  // in case this runs before the constructors that would call it
      return __builtin_cpu_supports("sse4.2");
#else
      return false;
#endif
    case Crc32cEngine::armv8:
#if defined(RUNHOOKS_DETAIL_CRC32C_ARMV8)
      return true;
#else
      return false;
#endif
  }
  return false;
}

// The fastest engine available, chosen on the first call.
inline Crc32cEngine crc32c_best_engine() noexcept {
  static const Crc32cEngine best = [] {
    for (const Crc32cEngine engine : {Crc32cEngine::sse42, Crc32cEngine::armv8})
      if (crc32c_engine_available(engine)) return engine;
    return Crc32cEngine::portable;
  }();
  return best;
}

// The CRC-32C of the bytes whose CRC-32C is `crc` (0 for none) followed by data[0, size), as
// TensorFlow's crc32c::Extend. `engine` must be available (tests pass one; all engines agree).
inline std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size,
                                   Crc32cEngine engine = crc32c_best_engine()) noexcept {
  switch (engine) {
#if defined(RUNHOOKS_DETAIL_CRC32C_SSE42)
    case Crc32cEngine::sse42: return crc32c_extend_sse42(crc, data, size);
#endif
#if defined(RUNHOOKS_DETAIL_CRC32C_ARMV8)
    case Crc32cEngine::armv8: return crc32c_extend_armv8(crc, data, size);
#endif
    default: return boost_crc_extend<Crc32cComputer>(crc, data, size);
  }
}

inline std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  return crc32c_extend(0, bytes.data(), bytes.size());
}

inline std::uint32_t crc32c(std::string_view bytes) noexcept {
  return crc32c_extend(0, bytes.data(), bytes.size());
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
