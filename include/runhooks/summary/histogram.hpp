// Defines `runhooks::Histogram`, TensorFlow's histogram of a tensor's values (the one
// tf.compat.v1.summary.histogram writes) and its HistogramProto encoding.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <runhooks/summary/detail/protobuf_wire.hpp>

namespace runhooks {
namespace detail {

// tensorflow/core/lib/histogram/histogram.cc, InitDefaultBucketsInner(): limits growing by 10%
// from 1e-12 to 1e20, mirrored for negative values, with 0 and +-DBL_MAX; 1551 limits. Computed
// exactly as TensorFlow computes them (v *= 1.1 in double), so the buckets are TensorFlow's.
inline const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> positive;
    for (double v = 1.0e-12; v < 1.0e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * positive.size() + 1);
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

// Field numbers of HistogramProto (tensorflow/core/framework/summary.proto).
inline constexpr std::uint32_t histogram_min_field = 1;           // double
inline constexpr std::uint32_t histogram_max_field = 2;           // double
inline constexpr std::uint32_t histogram_num_field = 3;           // double
inline constexpr std::uint32_t histogram_sum_field = 4;           // double
inline constexpr std::uint32_t histogram_sum_squares_field = 5;   // double
inline constexpr std::uint32_t histogram_bucket_limit_field = 6;  // repeated double, packed
inline constexpr std::uint32_t histogram_bucket_field = 7;        // repeated double, packed

}  // namespace detail

// TensorFlow's histogram::Histogram with its default buckets: add() puts a value in the bucket
// whose limit is the first one above it, and keeps min, max, count, sum and sum of squares.
// encode() is TensorFlow's EncodeToProto(proto, preserve_zero_buckets = false): runs of empty
// buckets collapse into one, and an empty histogram has one bucket (DBL_MAX, 0). TensorBoard's
// histogram dashboards read it. For finite values below DBL_MAX the values are TensorFlow's bit
// for bit (tests/fixtures).
//
// Every double is safe to add (tests/histogram.cpp, tests/fuzz/histogram_fuzz.cpp):
//   - DBL_MAX and +inf count in the last bucket (limit DBL_MAX, closed above), -inf in the first
//     (limit -DBL_MAX), as in TensorFlow; min and max are the least and greatest value added,
//     +-inf included; num, sum and sum_squares take them as any value, so sum is +-inf, or NaN
//     once both infinities came.
//   - NaN is ignored: no bucket, no count, min/max/sum unchanged; nan_count() says how many.
// Differs from TensorFlow: its Add() indexes one past its buckets for DBL_MAX, +inf and NaN (its
// summary ops reject NaN and infinities first, as SummarySaverHook does; DBL_MAX gets through).
// Finite sums can still overflow to +-inf (sum_squares from |value| > 1e154), as in TensorFlow.
class Histogram {
 public:
  Histogram() : buckets_(detail::default_bucket_limits().size(), 0.0) {}

  void add(double value) {
    if (std::isnan(value)) [[unlikely]] {
      ++nan_count_;
      return;
    }
    const std::vector<double>& limits = detail::default_bucket_limits();
    // upper_bound is end() for DBL_MAX and +inf: they belong to the last bucket, which is
    // closed above.
    const auto above = std::upper_bound(limits.begin(), limits.end(), value);
    const auto bucket = std::min(above - limits.begin(), std::ptrdiff_t(limits.size()) - 1);
    buckets_[static_cast<std::size_t>(bucket)] += 1.0;
    // The first value sets both, or +inf alone would leave min at its DBL_MAX start.
    if (min_ > value || num_ == 0.0) min_ = value;
    if (max_ < value || num_ == 0.0) max_ = value;
    num_ += 1.0;
    sum_ += value;
    sum_squares_ += value * value;
  }

  double min() const noexcept { return min_; }
  double max() const noexcept { return max_; }
  double num() const noexcept { return num_; }
  double sum() const noexcept { return sum_; }
  double sum_squares() const noexcept { return sum_squares_; }
  // The NaNs add() was given and ignored; not part of the proto.
  std::uint64_t nan_count() const noexcept { return nan_count_; }

  // The buckets as the proto holds them: (limit, count) pairs after collapsing empty runs.
  struct Buckets {
    std::vector<double> limits;
    std::vector<double> counts;
  };
  Buckets buckets() const {
    const std::vector<double>& limits = detail::default_bucket_limits();
    Buckets out;
    for (std::size_t i = 0; i < buckets_.size();) {
      double end = limits[i];
      double count = buckets_[i];
      ++i;
      if (count <= 0.0) {
        while (i < buckets_.size() && buckets_[i] <= 0.0) {
          end = limits[i];
          count = buckets_[i];
          ++i;
        }
      }
      out.limits.push_back(end);
      out.counts.push_back(count);
    }
    if (out.limits.empty()) {
      out.limits.push_back(DBL_MAX);
      out.counts.push_back(0.0);
    }
    return out;
  }

  // The HistogramProto bytes.
  std::string encode() const {
    std::string out;
    detail::put_double(out, detail::histogram_min_field, min_);
    detail::put_double(out, detail::histogram_max_field, max_);
    detail::put_double(out, detail::histogram_num_field, num_);
    detail::put_double(out, detail::histogram_sum_field, sum_);
    detail::put_double(out, detail::histogram_sum_squares_field, sum_squares_);
    const Buckets b = buckets();
    detail::put_packed_doubles(out, detail::histogram_bucket_limit_field, b.limits);
    detail::put_packed_doubles(out, detail::histogram_bucket_field, b.counts);
    return out;
  }

 private:
  std::vector<double> buckets_;
  double min_ = DBL_MAX;  // TensorFlow's Clear(): the last bucket limit
  double max_ = -DBL_MAX;
  double num_ = 0.0;
  double sum_ = 0.0;
  double sum_squares_ = 0.0;
  std::uint64_t nan_count_ = 0;
};

}  // namespace runhooks

// SummaryEncoder was defined here before issue 30; included so that code including this header for
// it still compiles (summary_encoder.hpp includes this one first, so either order works).
#include <runhooks/summary/summary_encoder.hpp>
