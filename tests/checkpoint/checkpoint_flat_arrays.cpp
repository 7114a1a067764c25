// FlatArrayWriter / FlatArrayReader: what a backend's save() and restore() use to write a few
// named arrays. Round trips of every element type, and every way a file can be wrong (cut short at
// any byte, a flipped bit anywhere, foreign, wrong version, wrong shape or type) is an error that
// names the file, never garbage values. The writer's bytes are those of an encoder written here
// from the format's description with Boost.CRC (CRC-32C, version 2); files of version 1 (CRC-32),
// as the previous runhooks wrote them, still read.
#include <doctest/doctest.h>

#include <boost/crc.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <runhooks/checkpoint/flat_arrays.hpp>

#include <support/checkpoint_backends.hpp>

using ckpt::TempDir;
using runhooks::CheckpointError;
using runhooks::FlatArrayReader;
using runhooks::FlatArrayWriter;

namespace {

void write_sample(const std::filesystem::path& file) {
  FlatArrayWriter out(file);
  out.add("weights", std::vector<double>{1.5, -2.25, 3.0});
  out.add("floats", std::array<float, 2>{0.5f, 4.0f});
  out.add("global_step", std::int64_t{42});
  out.add("bytes", std::vector<std::uint8_t>{1, 2, 255});
  out.add("i8", std::int8_t{-7});
  out.add("u16", std::vector<std::uint16_t>{65535});
  out.add("i32", std::vector<std::int32_t>{-1, 2});
  out.add("u32", std::uint32_t{4000000000u});
  out.add("u64", std::uint64_t{1} << 63);
  out.add("i16", std::int16_t{-300});
  out.add("empty", std::vector<double>{});
  out.close();
}

std::string bytes_of(const std::filesystem::path& file) { return ckpt::read_text(file); }

void put_bytes(const std::filesystem::path& file, const std::string& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string error_of(const std::filesystem::path& file) {
  try {
    FlatArrayReader reader(file);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

// write_sample's file as runhooks wrote it before format version 2 (commit f6d7222,
// x86-64): version 1, whose CRCs are zlib's CRC-32.
std::string version_1_sample() {
  const std::string_view hex =
      "5248415252415953010000000403020141525231070000000801000008000000"
      "03000000000000005a96d42ea904c75f77656967687473000000000000f83f00"
      "000000000002c000000000000008404152523106000000040100000400000002"
      "00000000000000e5290c0b2cf74287666c6f6174730000003f00008040415252"
      "310b00000008020000080000000100000000000000f7a1940db6525d2e676c6f"
      "62616c5f737465702a0000000000000041525231050000000103000001000000"
      "03000000000000002a3eb7e1ab3b868e62797465730102ff4152523102000000"
      "0102000001000000010000000000000035a563168ea659306938f94152523103"
      "000000020300000200000001000000000000000000ffffdb9f8f59753136ffff"
      "4152523103000000040200000400000002000000000000007437f655f899ca3f"
      "693332ffffffff02000000415252310300000004030000040000000100000000"
      "00000057b5a1d6be7db45875333200286bee4152523103000000080300000800"
      "00000100000000000000495c9a88390539b47536340000000000000080415252"
      "310300000002020000020000000100000000000000ffcd88fe61dbbc64693136"
      "d4fe41525231050000000801000008000000000000000000000000000000c1e7"
      "5fb1656d707479524841454e4430310b000000000000004c4afc8b00000000";
  std::string bytes;
  for (std::size_t i = 0; i < hex.size(); i += 2)
    bytes.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return bytes;
}

// The format as docs/checkpoints.md describes it, encoded with Boost.CRC alone: the reference
// for the writer's bytes, and a way to make files of either version.
struct EncodedArray {
  std::string name;
  std::uint32_t type, element_size;
  std::string data;
};

template <class Crc>
std::uint32_t crc_of(const std::string& bytes) {
  Crc crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

template <class T>
std::string raw_bytes(const T* values, std::size_t count) {
  return std::string(reinterpret_cast<const char*>(values), count * sizeof(T));
}

template <class Crc>
std::string encode(std::uint32_t version, const std::vector<EncodedArray>& arrays) {
  const auto u32 = [](std::uint32_t value) { return raw_bytes(&value, 1); };
  const auto u64 = [](std::uint64_t value) { return raw_bytes(&value, 1); };
  std::string file = "RHARRAYS" + u32(version) + u32(0x01020304u), record_crcs;
  for (const EncodedArray& array : arrays) {
    const std::string fields =
        u32(0x31525241u) + u32(static_cast<std::uint32_t>(array.name.size())) + u32(array.type) +
        u32(array.element_size) + u64(array.data.size() / array.element_size) +
        u32(crc_of<Crc>(array.data));
    const std::uint32_t header_crc = crc_of<Crc>(fields + u32(0) + array.name);
    file += fields + u32(header_crc) + array.name + array.data;
    record_crcs += u32(header_crc);
  }
  return file + "RHAEND01" + u64(arrays.size()) + u32(crc_of<Crc>(record_crcs)) + u32(0);
}

using Crc32c = boost::crc_optimal<32, 0x1EDC6F41U, 0xFFFFFFFFU, 0xFFFFFFFFU, true, true>;

// A float array of `count` elements, not periodic (a writer that put its pieces in the wrong
// order would fail its CRC).
std::vector<float> big_floats(std::size_t count) {
  std::vector<float> values(count);
  std::uint32_t x = 7;
  for (float& value : values) {
    x = x * 1664525u + 1013904223u;
    value = static_cast<float>(x >> 8) / 65536.0f;
  }
  return values;
}

}  // namespace

TEST_CASE("flat arrays: every element type round-trips") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const FlatArrayReader in(file);
  CHECK(in.names() == std::vector<std::string>{"weights", "floats", "global_step", "bytes", "i8",
                                               "u16", "i32", "u32", "u64", "i16", "empty"});
  CHECK(in.get<double>("weights") == std::vector<double>{1.5, -2.25, 3.0});
  std::array<float, 2> floats{};
  in.read("floats", floats);
  CHECK(floats == std::array<float, 2>{0.5f, 4.0f});
  CHECK(in.scalar<std::int64_t>("global_step") == 42);
  CHECK(in.get<std::uint8_t>("bytes") == std::vector<std::uint8_t>{1, 2, 255});
  CHECK(in.scalar<std::int8_t>("i8") == -7);
  CHECK(in.scalar<std::uint16_t>("u16") == 65535);
  CHECK(in.get<std::int32_t>("i32") == std::vector<std::int32_t>{-1, 2});
  CHECK(in.scalar<std::uint32_t>("u32") == 4000000000u);
  CHECK(in.scalar<std::uint64_t>("u64") == std::uint64_t{1} << 63);
  CHECK(in.scalar<std::int16_t>("i16") == -300);
  CHECK(in.get<double>("empty").empty());
  CHECK(in.size("weights") == 3);
  CHECK(in.contains("weights"));
  CHECK_FALSE(in.contains("bias"));
}

TEST_CASE("flat arrays: the writer writes format version 2, the bytes the format describes") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  // The same arrays, encoded with Boost's CRC-32C from the description.
  const double weights[] = {1.5, -2.25, 3.0};
  const float floats[] = {0.5f, 4.0f};
  const std::int64_t step = 42;
  const std::uint8_t bytes[] = {1, 2, 255};
  const std::int8_t i8 = -7;
  const std::uint16_t u16 = 65535;
  const std::int32_t i32[] = {-1, 2};
  const std::uint32_t u32 = 4000000000u;
  const std::uint64_t u64 = std::uint64_t{1} << 63;
  const std::int16_t i16 = -300;
  const std::vector<EncodedArray> arrays = {
      {"weights", 0x108, 8, raw_bytes(weights, 3)}, {"floats", 0x104, 4, raw_bytes(floats, 2)},
      {"global_step", 0x208, 8, raw_bytes(&step, 1)}, {"bytes", 0x301, 1, raw_bytes(bytes, 3)},
      {"i8", 0x201, 1, raw_bytes(&i8, 1)}, {"u16", 0x302, 2, raw_bytes(&u16, 1)},
      {"i32", 0x204, 4, raw_bytes(i32, 2)}, {"u32", 0x304, 4, raw_bytes(&u32, 1)},
      {"u64", 0x308, 8, raw_bytes(&u64, 1)}, {"i16", 0x202, 2, raw_bytes(&i16, 1)},
      {"empty", 0x108, 8, ""}};
  CHECK(bytes_of(file) == encode<Crc32c>(2, arrays));
  // The encoder with zlib's CRC-32 makes the previous runhooks' bytes: version 1 differs only
  // in its number and its CRCs.
  CHECK(encode<boost::crc_32_type>(1, arrays) == version_1_sample());
}

TEST_CASE("flat arrays: an array larger than the writer's pieces is written in one pass, right") {
  // 3 MiB + 12 bytes: three whole pieces of 1 MiB and a short one, between two small arrays.
  TempDir dir;
  const auto file = dir / "big.arrays";
  const std::vector<float> big = big_floats((std::size_t{3} << 20) / 4 + 3);
  {
    FlatArrayWriter out(file);
    out.add("before", std::int64_t{7});
    out.add("big", big);
    out.add("after", std::vector<double>{0.25});
    out.close();
  }
  const FlatArrayReader in(file);
  CHECK(in.get<float>("big") == big);
  CHECK(in.scalar<std::int64_t>("before") == 7);
  CHECK(in.get<double>("after") == std::vector<double>{0.25});
  const std::int64_t seven = 7;
  const double quarter = 0.25;
  CHECK(bytes_of(file) == encode<Crc32c>(2, {{"before", 0x208, 8, raw_bytes(&seven, 1)},
                                            {"big", 0x104, 4, raw_bytes(big.data(), big.size())},
                                            {"after", 0x108, 8, raw_bytes(&quarter, 1)}}));
}

TEST_CASE("flat arrays: files of version 1 (CRC-32), as runhooks wrote them before, still read") {
  TempDir dir;
  const auto file = dir / "old.arrays";
  put_bytes(file, version_1_sample());
  {
    const FlatArrayReader in(file);
    CHECK(in.names() == std::vector<std::string>{"weights", "floats", "global_step", "bytes", "i8",
                                                 "u16", "i32", "u32", "u64", "i16", "empty"});
    CHECK(in.get<double>("weights") == std::vector<double>{1.5, -2.25, 3.0});
    CHECK(in.get<float>("floats") == std::vector<float>{0.5f, 4.0f});
    CHECK(in.scalar<std::int64_t>("global_step") == 42);
    CHECK(in.get<std::uint8_t>("bytes") == std::vector<std::uint8_t>{1, 2, 255});
    CHECK(in.scalar<std::int8_t>("i8") == -7);
    CHECK(in.scalar<std::uint16_t>("u16") == 65535);
    CHECK(in.get<std::int32_t>("i32") == std::vector<std::int32_t>{-1, 2});
    CHECK(in.scalar<std::uint32_t>("u32") == 4000000000u);
    CHECK(in.scalar<std::uint64_t>("u64") == std::uint64_t{1} << 63);
    CHECK(in.scalar<std::int16_t>("i16") == -300);
    CHECK(in.get<double>("empty").empty());
  }
  // A large one, made by the reference encoder.
  const std::vector<float> big = big_floats(300001);
  put_bytes(file, encode<boost::crc_32_type>(
                      1, {{"big", 0x104, 4, raw_bytes(big.data(), big.size())}}));
  CHECK(FlatArrayReader(file).get<float>("big") == big);
  // Version 1's CRC is not version 2's: the same bytes under the other version number fail.
  std::string relabelled = version_1_sample();
  relabelled[8] = 2;
  put_bytes(file, relabelled);
  CHECK(error_of(file).find("fails its checksum") != std::string::npos);
}

TEST_CASE("flat arrays: a file cut at any byte is refused, naming the file") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const auto cut = dir / "cut.arrays";
  for (const std::string& whole : {bytes_of(file), version_1_sample()}) {
    for (std::size_t size = 0; size < whole.size(); ++size) {
      put_bytes(cut, whole.substr(0, size));
      const std::string error = error_of(cut);
      INFO("version " << int{whole[8]} << ", cut at byte " << size << " of " << whole.size());
      REQUIRE(!error.empty());
      CHECK(error.find(cut.string()) != std::string::npos);
    }
  }
}

TEST_CASE("flat arrays: any flipped bit is refused") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const auto bad = dir / "bad.arrays";
  // Version 1, the reader's other checksum, one bit per byte.
  for (const std::string& whole : {bytes_of(file), version_1_sample()}) {
    for (std::size_t at = 0; at < whole.size(); ++at) {
      for (int bit : {0, 5}) {
        if (whole[8] == 1 && bit != (at % 2 == 0 ? 0 : 5)) continue;
        std::string bytes = whole;
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << bit));
        put_bytes(bad, bytes);
        INFO("version " << int{whole[8]} << ", byte " << at << " bit " << bit);
        CHECK(!error_of(bad).empty());
      }
    }
  }
}

TEST_CASE("flat arrays: the errors say what is wrong") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const std::string whole = bytes_of(file);

  SUBCASE("a foreign file") {
    put_bytes(file, "model_checkpoint_path: \"x\"\n");
    CHECK(error_of(file).find("not a runhooks flat-array file") != std::string::npos);
  }
  SUBCASE("another format version") {
    for (const char version : {'\0', '\3'}) {
      std::string bytes = whole;
      bytes[8] = version;
      put_bytes(file, bytes);
      CHECK(error_of(file).find("format version " + std::to_string(int{version}) +
                                "; this runhooks reads versions 1 to 2") != std::string::npos);
    }
  }
  SUBCASE("the other byte order") {
    std::string bytes = whole;
    std::swap(bytes[12], bytes[15]);
    std::swap(bytes[13], bytes[14]);
    put_bytes(file, bytes);
    CHECK(error_of(file).find("other byte order") != std::string::npos);
  }
  SUBCASE("no end marker") {
    put_bytes(file, whole.substr(0, whole.size() - 24));
    CHECK(error_of(file).find("truncated or torn after 11 arrays (no end marker)") !=
          std::string::npos);
  }
  SUBCASE("a changed value") {
    std::string bytes = whole;
    const std::size_t at = bytes.find("weights") + 7;  // the first byte of the data
    bytes[at] = static_cast<char>(bytes[at] ^ 1);
    put_bytes(file, bytes);
    CHECK(error_of(file).find("array 'weights' fails its checksum") != std::string::npos);
  }
  SUBCASE("bytes after the end") {
    put_bytes(file, whole + "x");
    CHECK(error_of(file).find("1 bytes after the end marker") != std::string::npos);
  }
  SUBCASE("a missing file") {
    std::filesystem::remove(file);
    const std::string error = error_of(file);
    CHECK(error.find("cannot open '" + file.string() + "': No such file or directory") !=
          std::string::npos);
  }
}

TEST_CASE("flat arrays: reading the wrong shape or type is an error") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const FlatArrayReader in(file);
  std::array<double, 2> two{};
  CHECK_THROWS_WITH_AS(in.read("weights", two),
                       doctest::Contains("array 'weights' has 3 elements, the backend expects 2"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(in.get<float>("weights"),
                       doctest::Contains("array 'weights' holds float64, the backend expects float32"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(in.scalar<std::int64_t>("bias"), doctest::Contains("has no array 'bias'"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(in.scalar<double>("weights"), doctest::Contains("has 3 elements"),
                       CheckpointError);
}

TEST_CASE("flat arrays: names must be unique and non-empty") {
  TempDir dir;
  FlatArrayWriter out(dir / "x.arrays");
  out.add("a", 1.0);
  CHECK_THROWS_WITH_AS(out.add("a", 2.0), doctest::Contains("array 'a' added twice"), CheckpointError);
  CHECK_THROWS_WITH_AS(out.add("", 2.0), doctest::Contains("1 to 4096 bytes, got 0"), CheckpointError);
}

TEST_CASE("flat arrays: a writer that is not closed leaves a file readers refuse") {
  TempDir dir;
  {
    FlatArrayWriter out(dir / "x.arrays");
    out.add("a", 1.0);
  }
  CHECK(error_of(dir / "x.arrays").find("no end marker") != std::string::npos);
}

TEST_CASE("flat arrays: a write that fails names the file and the cause") {
  // /dev/full accepts the open and fails every write with ENOSPC.
  if (!std::filesystem::exists("/dev/full")) return;
  std::vector<double> big(1 << 16, 1.0);
  CHECK_THROWS_WITH_AS(
      {
        FlatArrayWriter out("/dev/full");
        out.add("big", big);
        out.close();
      },
      doctest::Contains("writing '/dev/full': No space left on device"), CheckpointError);
}
