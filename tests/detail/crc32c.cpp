// include/runhooks/detail/crc32c.hpp: every engine this build and this CPU have (the CPU's
// instruction and the portable Boost.CRC loop, which any test can select) gives the published
// CRC-32C values, TensorFlow's record framing, and Boost's result for every length and start.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <runhooks/detail/crc32c.hpp>

using runhooks::detail::Crc32cEngine;
using runhooks::detail::crc32c_extend;

namespace {

std::vector<Crc32cEngine> available_engines() {
  std::vector<Crc32cEngine> engines;
  for (const Crc32cEngine engine :
       {Crc32cEngine::portable, Crc32cEngine::sse42, Crc32cEngine::armv8})
    if (runhooks::detail::crc32c_engine_available(engine)) engines.push_back(engine);
  return engines;
}

std::string engine_name(Crc32cEngine engine) {
  switch (engine) {
    case Crc32cEngine::portable: return "portable";
    case Crc32cEngine::sse42: return "sse42";
    case Crc32cEngine::armv8: return "armv8";
  }
  return "?";
}

std::uint32_t crc_of(const void* data, std::size_t size, Crc32cEngine engine) {
  return crc32c_extend(0, data, size, engine);
}

// Boost.CRC in one call, as the library computed every CRC-32C before the engines existed.
std::uint32_t boost_crc32c(const unsigned char* data, std::size_t size) {
  runhooks::detail::Crc32cComputer crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

// Not periodic at any stream length (a repeating pattern would hide streams combined in the
// wrong order); the generator of the TensorFlow vectors below.
std::vector<unsigned char> pattern(std::size_t size) {
  std::vector<unsigned char> bytes(size);
  std::uint32_t x = 1;
  for (unsigned char& byte : bytes) {
    x = x * 1103515245U + 12345U;
    byte = static_cast<unsigned char>(x >> 16);
  }
  return bytes;
}

}  // namespace

TEST_CASE("crc32c: the build uses the CPU's instruction where it has one") {
  CHECK(runhooks::detail::crc32c_engine_available(Crc32cEngine::portable));
  const Crc32cEngine best = runhooks::detail::crc32c_best_engine();
  CHECK(runhooks::detail::crc32c_engine_available(best));
  MESSAGE("engine: " << engine_name(best));
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) CHECK(best == Crc32cEngine::sse42);
#endif
#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
  CHECK(best == Crc32cEngine::armv8);
#endif
}

TEST_CASE("crc32c: every engine gives the published check values") {
  for (const Crc32cEngine engine : available_engines()) {
    INFO("engine " << engine_name(engine));
    // The CRC catalogue's check value.
    CHECK(crc_of("123456789", 9, engine) == 0xE3069283U);
    CHECK(crc_of("", 0, engine) == 0U);
    // RFC 3720 (iSCSI), B.4.
    std::array<unsigned char, 32> bytes{};
    CHECK(crc_of(bytes.data(), bytes.size(), engine) == 0x8A9136AAU);
    bytes.fill(0xFF);
    CHECK(crc_of(bytes.data(), bytes.size(), engine) == 0x62A8AB43U);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i);
    CHECK(crc_of(bytes.data(), bytes.size(), engine) == 0x46DD794EU);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(31 - i);
    CHECK(crc_of(bytes.data(), bytes.size(), engine) == 0x113FDB5CU);
    const std::array<unsigned char, 48> read_pdu = {
        0x01, 0xC0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    CHECK(crc_of(read_pdu.data(), read_pdu.size(), engine) == 0xD9963A56U);
    // TensorFlow's unaligned cases of the same PDU (tensorflow/core/lib/hash/crc32c_test.cc).
    CHECK(crc_of(read_pdu.data(), read_pdu.size() - 7, engine) == 0xDD1B19BEU);
    CHECK(crc_of(read_pdu.data() + 1, read_pdu.size() - 4, engine) == 0x4930C4B1U);
    // Extend, as TensorFlow's crc32c::Extend.
    CHECK(crc32c_extend(crc_of("hello ", 6, engine), "world", 5, engine) ==
          crc_of("hello world", 11, engine));
  }
}

TEST_CASE("crc32c: every engine frames records as TensorFlow's record writer does") {
  // tf.io.TFRecordWriter (TensorFlow 2.21) wrote one record of each length, of pattern(length);
  // each record is: u64 length, masked CRC of those 8 bytes, the data, masked CRC of the data.
  // The long ones cover three 64 KiB streams, three 4 KiB streams and what one stream finishes.
  struct Record {
    std::size_t length;
    std::uint32_t masked_length_crc, masked_data_crc;
  };
  const std::array<Record, 10> records = {{
      {0, 0x07980329U, 0xA282EAD8U},
      {1, 0x41DE7501U, 0xC77E597BU},
      {7, 0x119FD7BBU, 0x8E217A31U},
      {8, 0x0F2486FFU, 0xE498355EU},
      {9, 0x3971F937U, 0x8D8C49E2U},
      {100, 0xDF1C5F43U, 0x4C654677U},
      {12288, 0x39A54529U, 0xF5DCA1E5U},
      {12296, 0x4119C8FFU, 0x6A2866CAU},
      {208909, 0x9A3951F5U, 0xDE112F8DU},
      {1048579, 0xAE3E1998U, 0xB9FD8C81U},
  }};
  for (const Crc32cEngine engine : available_engines()) {
    for (const Record& record : records) {
      INFO("engine " << engine_name(engine) << ", a record of " << record.length << " bytes");
      std::array<unsigned char, 8> length{};
      for (std::size_t i = 0; i < 8; ++i)
        length[i] = static_cast<unsigned char>(std::uint64_t{record.length} >> (8 * i));
      CHECK(runhooks::detail::masked_crc32c(crc_of(length.data(), 8, engine)) ==
            record.masked_length_crc);
      const std::vector<unsigned char> data = pattern(record.length);
      CHECK(runhooks::detail::masked_crc32c(crc_of(data.data(), data.size(), engine)) ==
            record.masked_data_crc);
    }
  }
  for (const std::uint32_t crc : {0U, 1U, 0xE3069283U, 0xFFFFFFFFU})
    CHECK(runhooks::detail::unmasked_crc32c(runhooks::detail::masked_crc32c(crc)) == crc);
}

TEST_CASE("crc32c: every engine is Boost.CRC for every length 0..300 from every start 0..7") {
  const std::vector<unsigned char> bytes = pattern(300 + 8);
  for (const Crc32cEngine engine : available_engines())
    for (std::size_t start = 0; start < 8; ++start)
      for (std::size_t size = 0; size <= 300; ++size) {
        const std::uint32_t expected = boost_crc32c(bytes.data() + start, size);
        if (crc_of(bytes.data() + start, size, engine) != expected) {
          FAIL_CHECK("engine " << engine_name(engine) << ", start " << start << ", " << size
                               << " bytes");
        }
      }
}

TEST_CASE("crc32c: every engine is Boost.CRC around the lengths where its streams change") {
  // 3 x 4 KiB and 3 x 64 KiB (one round of three streams), and one more round of each.
  const std::vector<unsigned char> bytes = pattern(2 * 3 * 65536 + 2 * 3 * 4096 + 64);
  std::vector<std::size_t> sizes;
  for (const std::size_t edge : std::to_array<std::size_t>(
           {3 * 4096, 2 * 3 * 4096, 3 * 65536, 3 * 65536 + 3 * 4096, 2 * 3 * 65536 + 2 * 3 * 4096}))
    for (const std::size_t delta : std::to_array<std::size_t>({0, 1, 7, 8, 9, 15, 16, 17})) {
      sizes.push_back(edge + delta);
      sizes.push_back(edge - delta);
    }
  for (const std::size_t start : std::to_array<std::size_t>({0, 1, 13}))
    for (const std::size_t size : sizes) {
      const std::uint32_t expected = boost_crc32c(bytes.data() + start, size);
      for (const Crc32cEngine engine : available_engines()) {
        INFO("engine " << engine_name(engine) << ", start " << start << ", " << size << " bytes");
        CHECK(crc_of(bytes.data() + start, size, engine) == expected);
      }
    }
}

TEST_CASE("crc32c: extending in pieces gives the CRC of the whole, on random splits") {
  const std::vector<unsigned char> bytes = pattern(700000);
  std::mt19937_64 random(20240521);
  for (const Crc32cEngine engine : available_engines())
    for (int trial = 0; trial < 40; ++trial) {
      const std::size_t start = random() % 64, size = random() % (bytes.size() - start);
      const std::uint32_t whole = crc_of(bytes.data() + start, size, engine);
      std::uint32_t pieces = 0;
      std::size_t done = 0;
      while (done < size) {
        const std::size_t piece = std::min<std::size_t>(size - done, random() % 300000);
        // Each piece by an engine of its own: they share the register's meaning.
        const std::vector<Crc32cEngine> engines = available_engines();
        pieces = crc32c_extend(pieces, bytes.data() + start + done, piece,
                               engines[random() % engines.size()]);
        done += piece;
      }
      INFO("engine " << engine_name(engine) << ", start " << start << ", " << size << " bytes");
      CHECK(pieces == whole);
    }
}

TEST_CASE("crc32c: appending zeros is a multiplication") {
  using runhooks::detail::crc32c_multiply;
  using runhooks::detail::crc32c_zeros_operator;
  static_assert(crc32c_zeros_operator(0) == 1U << 31);  // x^0
  static_assert(crc32c_multiply(1U << 31, 0x12345678U) == 0x12345678U);
  static_assert(crc32c_multiply(crc32c_zeros_operator(3), crc32c_zeros_operator(5)) ==
                crc32c_zeros_operator(8));
  // The register after n zero bytes is the register times x^(8n): with final XORs undone.
  const std::vector<unsigned char> zeros(5000, 0);
  const std::uint32_t crc = crc_of("123456789", 9, Crc32cEngine::portable);
  for (const std::size_t n : std::to_array<std::size_t>({1, 7, 4096, 5000})) {
    const std::uint32_t extended = crc32c_extend(crc, zeros.data(), n, Crc32cEngine::portable);
    CHECK(~extended == crc32c_multiply(crc32c_zeros_operator(n), ~crc));
  }
}
