// FlatArrayWriter / FlatArrayReader: what a backend's save() and restore() use to write a few
// named arrays. Round trips of every element type, and every way a file can be wrong (cut short at
// any byte, a flipped bit anywhere, foreign, wrong version, wrong shape or type) is an error that
// names the file, never garbage values.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <string>
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

TEST_CASE("flat arrays: a file cut at any byte is refused, naming the file") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const std::string whole = bytes_of(file);
  const auto cut = dir / "cut.arrays";
  for (std::size_t size = 0; size < whole.size(); ++size) {
    put_bytes(cut, whole.substr(0, size));
    const std::string error = error_of(cut);
    INFO("cut at byte " << size << " of " << whole.size());
    REQUIRE(!error.empty());
    CHECK(error.find(cut.string()) != std::string::npos);
  }
}

TEST_CASE("flat arrays: any flipped bit is refused") {
  TempDir dir;
  const auto file = dir / "state.arrays";
  write_sample(file);
  const std::string whole = bytes_of(file);
  const auto bad = dir / "bad.arrays";
  for (std::size_t at = 0; at < whole.size(); ++at) {
    for (int bit : {0, 5}) {
      std::string bytes = whole;
      bytes[at] = static_cast<char>(bytes[at] ^ (1 << bit));
      put_bytes(bad, bytes);
      INFO("byte " << at << " bit " << bit);
      CHECK(!error_of(bad).empty());
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
    std::string bytes = whole;
    bytes[8] = 2;
    put_bytes(file, bytes);
    CHECK(error_of(file).find("format version 2; this runhooks reads version 1") != std::string::npos);
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
