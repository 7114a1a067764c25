// Writes the seed corpus of histogram_fuzz into the directory given as its argument: inputs in
// its layout (tag length, tag, wall time, step, then 8-byte doubles) holding the doubles at the
// edges of TensorFlow's buckets, so the fuzzer starts where overflows were, not where random
// bytes rarely go. Generated at test time, so no binary is committed.

#include <bit>
#include <cfloat>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fs = std::filesystem;

namespace {

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> (8 * i))));
  }
}

std::string seed(std::string_view tag, double wall_time, std::int64_t step,
                 const std::vector<double>& values) {
  std::string out;
  out.push_back(static_cast<char>(tag.size()));
  out.append(tag);
  put_u64(out, std::bit_cast<std::uint64_t>(wall_time));
  put_u64(out, static_cast<std::uint64_t>(step));
  for (const double v : values) put_u64(out, std::bit_cast<std::uint64_t>(v));
  return out;
}

void write_seed(const fs::path& dir, const std::string& name, std::string_view bytes) {
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) throw std::runtime_error("cannot write " + (dir / name).string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  try {
    const fs::path dir = argv[1];
    fs::create_directories(dir);
    constexpr double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double signalling = std::bit_cast<double>(std::uint64_t{0x7FF0'0000'0000'0001});
    const double negative_payload = std::bit_cast<double>(std::uint64_t{0xFFF8'DEAD'BEEF'0001});
    const double denormal = std::numeric_limits<double>::denorm_min();
    const std::vector<double> edges = {DBL_MAX, -DBL_MAX, inf,     -inf,   nan,      signalling,
                                       negative_payload, denormal, -denormal, DBL_MIN, -DBL_MIN,
                                       0.0,     -0.0,     1.0e20,  -1.0e20, 1.0e-12, -1.0e-12,
                                       1.0e154, 1.0,      -2.5};
    write_seed(dir, "edges", seed("weights", 1700000000.25, 100, edges));
    write_seed(dir, "empty", seed("", 0.0, 0, {}));
    write_seed(dir, "nan_only", seed("nan", nan, -1, {nan, nan}));
    write_seed(dir, "ordinary", seed("layer/kernel", 1700000000.0, 1'000'000'000'000,
                                     {0.0, 1.0, 1.0, -2.5, 3.0, 0.125, -0.5, 7.0}));
    int i = 0;
    for (const double v : edges) {
      write_seed(dir, "alone_" + std::to_string(i++), seed("x", 1.0, 1, {v}));
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_histogram_seeds: %s\n", error.what());
    return 1;
  }
  return 0;
}
