// runhooks::Histogram on every kind of double (issue 17, item 5): DBL_MAX, +-inf, NaN,
// denormals and -0.0 land in a bucket of the array or nowhere, never past it (the ASan build
// reports the write that add(DBL_MAX) once made one past the end), and the proto stays whole.
// TensorFlow's own values for ordinary inputs: tests/hooks/summary_saver_hook.cpp,
// tests/fixtures.

#include <runhooks/summary/histogram.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double quiet_nan = std::numeric_limits<double>::quiet_NaN();
constexpr double denormal = std::numeric_limits<double>::denorm_min();

double total(const runhooks::Histogram::Buckets& b) {
  double sum = 0.0;
  for (const double c : b.counts) sum += c;
  return sum;
}

// The (limit, count) pairs of the proto, for whole-vector comparisons.
std::vector<std::pair<double, double>> pairs(const runhooks::Histogram& h) {
  const auto b = h.buckets();
  std::vector<std::pair<double, double>> out;
  for (std::size_t i = 0; i < b.limits.size(); ++i) out.emplace_back(b.limits[i], b.counts[i]);
  return out;
}

// A histogram holding only `value`.
runhooks::Histogram of(double value) {
  runhooks::Histogram h;
  h.add(value);
  return h;
}

}  // namespace

TEST_CASE("Histogram: DBL_MAX counts in the last bucket, whose limit is DBL_MAX") {
  const runhooks::Histogram h = of(DBL_MAX);
  CHECK(h.num() == 1.0);
  CHECK(h.min() == DBL_MAX);
  CHECK(h.max() == DBL_MAX);
  CHECK(h.sum() == DBL_MAX);
  CHECK(h.sum_squares() == inf);  // overflows, as TensorFlow's does for |value| > 1.3e154
  const auto b = pairs(h);
  REQUIRE(b.size() == 2);  // the empty run below it, then its own bucket
  CHECK(b[1] == std::pair{DBL_MAX, 1.0});
  CHECK(total(h.buckets()) == h.num());
}

TEST_CASE("Histogram: -DBL_MAX counts in the second bucket, the first that is above it") {
  const runhooks::Histogram h = of(-DBL_MAX);
  const auto b = pairs(h);
  REQUIRE(b.size() == 3);
  CHECK(b[0] == std::pair{-DBL_MAX, 0.0});
  CHECK(b[1].second == 1.0);
  CHECK(b[1].first > -DBL_MAX);
  CHECK(b[1].first < -1.0e19);  // the largest of TensorFlow's 10% steps below -1e20, negated
  CHECK(b[2] == std::pair{DBL_MAX, 0.0});
  CHECK(h.min() == -DBL_MAX);
  CHECK(h.max() == -DBL_MAX);
}

TEST_CASE("Histogram: +inf counts in the last bucket and -inf in the first") {
  const runhooks::Histogram up = of(inf);
  const auto b = pairs(up);
  REQUIRE(b.size() == 2);
  CHECK(b[1] == std::pair{DBL_MAX, 1.0});
  CHECK(up.num() == 1.0);
  CHECK(up.min() == inf);
  CHECK(up.max() == inf);
  CHECK(up.sum() == inf);

  const runhooks::Histogram down = of(-inf);
  const auto d = pairs(down);
  REQUIRE(d.size() == 2);
  CHECK(d[0] == std::pair{-DBL_MAX, 1.0});
  CHECK(d[1] == std::pair{DBL_MAX, 0.0});
  CHECK(down.min() == -inf);
  CHECK(down.max() == -inf);
  CHECK(down.sum() == -inf);
  CHECK(down.sum_squares() == inf);

  runhooks::Histogram both;
  both.add(inf);
  both.add(-inf);
  CHECK(both.num() == 2.0);
  CHECK(total(both.buckets()) == 2.0);
  CHECK(std::isnan(both.sum()));  // inf + -inf: no number is right, and none is claimed
  CHECK(both.min() == -inf);
  CHECK(both.max() == inf);
}

TEST_CASE("Histogram: NaN is ignored and counted apart; the proto is the empty histogram's") {
  runhooks::Histogram h;
  h.add(quiet_nan);
  h.add(-quiet_nan);
  h.add(std::bit_cast<double>(std::uint64_t{0x7FF0'0000'0000'0001}));  // a signalling NaN
  CHECK(h.nan_count() == 3);
  CHECK(h.num() == 0.0);
  CHECK(h.sum() == 0.0);
  CHECK(h.sum_squares() == 0.0);
  CHECK(h.min() == DBL_MAX);  // TensorFlow's Clear() state
  CHECK(h.max() == -DBL_MAX);
  CHECK(h.encode() == runhooks::Histogram{}.encode());

  h.add(2.0);
  CHECK(h.num() == 1.0);
  CHECK(h.min() == 2.0);
  CHECK(h.max() == 2.0);
  CHECK(h.sum() == 2.0);
  CHECK(total(h.buckets()) == 1.0);
}

TEST_CASE("Histogram: denormals fall between 0 and +-1e-12, TensorFlow's smallest limits") {
  const auto up = pairs(of(denormal));
  REQUIRE(up.size() == 3);
  CHECK(up[0] == std::pair{0.0, 0.0});  // the empty run up to and including the limit 0
  CHECK(up[1] == std::pair{1.0e-12, 1.0});
  const auto down = pairs(of(-denormal));
  REQUIRE(down.size() == 3);
  CHECK(down[0] == std::pair{-1.0e-12, 0.0});
  CHECK(down[1] == std::pair{0.0, 1.0});
  CHECK(pairs(of(DBL_MIN)) == up);
}

TEST_CASE("Histogram: -0.0 is 0.0's bucket and keeps its sign in min, max and the proto") {
  const runhooks::Histogram h = of(-0.0);
  CHECK(pairs(h) == pairs(of(0.0)));
  CHECK(h.min() == 0.0);
  CHECK(std::signbit(h.min()));
  CHECK(std::signbit(h.max()));
  // min = -0.0 is written (its bits are not zero, and protobuf writes it too); 0.0 is omitted.
  CHECK(h.encode() != of(0.0).encode());
}

TEST_CASE("Histogram: every special value at once; counts still sum to num") {
  runhooks::Histogram h;
  for (const double v : {DBL_MAX, -DBL_MAX, inf, -inf, quiet_nan, denormal, -denormal, 0.0, -0.0,
                         DBL_MIN, -DBL_MIN, 1.0e20, -1.0e20, 1.0, -1.0}) {
    h.add(v);
  }
  CHECK(h.nan_count() == 1);
  CHECK(h.num() == 14.0);
  CHECK(total(h.buckets()) == 14.0);
  CHECK(h.min() == -inf);
  CHECK(h.max() == inf);
  const auto b = h.buckets();
  CHECK(b.limits.front() == -DBL_MAX);
  CHECK(b.counts.front() == 1.0);  // -inf
  CHECK(b.limits.back() == DBL_MAX);
  CHECK(b.counts.back() == 3.0);   // 1e20, DBL_MAX, +inf
}
