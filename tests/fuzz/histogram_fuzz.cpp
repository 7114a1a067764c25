// libFuzzer target for runhooks::Histogram and the summary encoding (issue 17): every double a
// user can pass, as raw bit patterns (NaN payloads, DBL_MAX, denormals, +-inf, -0.0), goes into
// Histogram::add, SummaryEncoder and encode_scalar_event (file-version and SessionLog START
// records too), and the records come back through the project's own event reader. Built only
// by a clang build where -fsanitize=fuzzer links (tests/fuzz/meson.build); ASan and UBSan catch
// an index past the buckets, the checks below the rest.
//
// Input: byte 0 sets the tag's length (0-31), the tag's bytes follow, then 8 bytes of wall time,
// 8 of step, and the values, 8 bytes each (little-endian doubles; a short tail is dropped).
// Checked on each input, against values computed here without the code under test's search:
//   - each non-NaN value counts once, in the bucket a linear scan of the limits picks (the first
//     limit above it, else the last); NaNs count in nan_count() and nowhere else; the proto's
//     (limit, count) pairs hold exactly those counts, summing to num;
//   - min, max, sum and sum_squares are the least, the greatest, and the sums in input order;
//   - the framed Event decodes with parse_events to the same step, wall time, tags and scalar
//     bits, and the HistogramProto inside it to the same fields and buckets, bit for bit;
//   - a tag that is not UTF-8 is refused with std::invalid_argument (issue 29), not encoded.

#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>
#include <runhooks/summary/detail/utf8.hpp>
#include <runhooks/summary/histogram.hpp>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace detail = runhooks::detail;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "histogram_fuzz: %s\n", what);
  std::abort();
}

void require(bool holds, const char* what) {
  if (!holds) fail(what);
}

// Doubles compare by bits, so that a NaN equals the same NaN and -0.0 differs from 0.0; a NaN
// computed by the hardware (inf + -inf) may differ in sign from one computed elsewhere.
bool same(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

// A float written and read back keeps its bits, NaN payload included.
bool same_float(float a, float b) {
  return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}

class Input {
 public:
  explicit Input(std::string_view bytes) : bytes_(bytes) {}
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8 && !bytes_.empty(); ++i) {
      v |= std::uint64_t{static_cast<std::uint8_t>(bytes_.front())} << (8 * i);
      bytes_.remove_prefix(1);
    }
    return v;
  }
  std::uint8_t byte() {
    if (bytes_.empty()) return 0;
    const auto b = static_cast<std::uint8_t>(bytes_.front());
    bytes_.remove_prefix(1);
    return b;
  }
  std::string_view take(std::size_t n) {
    const auto out = bytes_.substr(0, n);
    bytes_.remove_prefix(out.size());
    return out;
  }
  std::size_t left() const noexcept { return bytes_.size(); }

 private:
  std::string_view bytes_;
};

// The bucket of `value` by a linear scan: the first limit above it, else the last (DBL_MAX and
// +inf); -inf is below -DBL_MAX, the first limit.
std::size_t bucket_of(double value, const std::vector<double>& limits) {
  for (std::size_t i = 0; i < limits.size(); ++i) {
    if (value < limits[i]) return i;
  }
  return limits.size() - 1;
}

// The fields of a HistogramProto, read with the event reader's wire cursor.
struct DecodedHistogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, counts;
};

std::vector<double> packed_doubles(std::string_view bytes) {
  require(bytes.size() % 8 == 0, "a packed double field's length is not a multiple of 8");
  std::vector<double> out;
  detail::WireReader in(bytes);
  while (!in.done()) out.push_back(std::bit_cast<double>(in.little_endian(8)));
  return out;
}

DecodedHistogram decode_histogram(std::string_view bytes) {
  DecodedHistogram h;
  detail::WireReader in(bytes);
  while (!in.done()) {
    const std::uint64_t key = in.key();
    const auto field = key >> 3;
    if ((key & 7U) == 1U && field >= 1 && field <= 5) {
      const double v = std::bit_cast<double>(in.little_endian(8));
      double* slots[] = {&h.min, &h.max, &h.num, &h.sum, &h.sum_squares};
      *slots[field - 1] = v;
    } else if (key == detail::wire_key(6, 2)) {
      h.limits = packed_doubles(in.length_delimited());
    } else if (key == detail::wire_key(7, 2)) {
      h.counts = packed_doubles(in.length_delimited());
    } else {
      fail("the HistogramProto holds a field encode() never writes");
    }
  }
  return h;
}

// The Summary.Value messages of an Event's summary, in order.
std::vector<std::string_view> summary_values(std::string_view event) {
  std::vector<std::string_view> values;
  detail::WireReader in(event);
  while (!in.done()) {
    const std::uint64_t key = in.key();
    if (key != detail::wire_key(5, 2)) {
      in.skip(key);
      continue;
    }
    detail::WireReader summary(in.length_delimited());
    while (!summary.done()) {
      const std::uint64_t summary_key = summary.key();
      require(summary_key == detail::wire_key(1, 2), "a Summary field other than value");
      values.push_back(summary.length_delimited());
    }
  }
  return values;
}

std::string_view histo_of(std::string_view value) {
  detail::WireReader in(value);
  std::string_view histo;
  bool found = false;
  while (!in.done()) {
    const std::uint64_t key = in.key();
    if (key == detail::wire_key(5, 2)) {
      histo = in.length_delimited();
      found = true;
    } else {
      in.skip(key);
    }
  }
  require(found, "a histogram value without its histo field");
  return histo;
}

runhooks::Event only_event(const std::string& event_bytes) {
  const auto events = runhooks::parse_events(detail::frame_record(event_bytes), "histogram_fuzz");
  require(events.size() == 1, "one framed record did not read back as one event");
  return events[0];
}

void check_histogram(const runhooks::Histogram& h, const std::vector<double>& values) {
  const std::vector<double>& limits = detail::default_bucket_limits();
  std::vector<double> expected(limits.size(), 0.0);
  double num = 0, sum = 0, sum_squares = 0, min = 0, max = 0;
  std::uint64_t nans = 0;
  for (const double v : values) {
    if (std::isnan(v)) {
      ++nans;
      continue;
    }
    expected[bucket_of(v, limits)] += 1.0;
    if (num == 0 || v < min) min = v;
    if (num == 0 || v > max) max = v;
    num += 1.0;
    sum += v;
    sum_squares += v * v;
  }
  require(h.nan_count() == nans, "nan_count() is not the number of NaNs added");
  require(h.num() == num, "num() is not the number of values that are not NaN");
  require(same(h.sum(), sum), "sum() is not the sum of the values");
  require(same(h.sum_squares(), sum_squares), "sum_squares() is not the sum of their squares");
  if (num > 0) {
    require(h.min() == min && h.max() == max, "min()/max() are not the least/greatest value");
    require(h.min() <= h.max(), "min() > max()");
  } else {
    require(h.min() == DBL_MAX && h.max() == -DBL_MAX, "an empty histogram is not TensorFlow's");
  }

  const auto b = h.buckets();
  require(!b.limits.empty() && b.limits.size() == b.counts.size(), "buckets() pairs are uneven");
  require(b.limits.back() == DBL_MAX, "the last bucket's limit is not DBL_MAX");
  double total = 0;
  std::size_t non_empty = 0;
  for (std::size_t i = 0; i < b.limits.size(); ++i) {
    require(i == 0 || b.limits[i - 1] < b.limits[i], "bucket limits do not increase");
    const double count = b.counts[i];
    require(count >= 0 && count == std::floor(count), "a bucket count is not a whole number");
    if (count > 0) {
      const auto limit = std::find(limits.begin(), limits.end(), b.limits[i]);
      require(limit != limits.end(), "a non-empty bucket's limit is not a default limit");
      require(expected[static_cast<std::size_t>(limit - limits.begin())] == count,
              "a bucket holds another count than its values'");
      ++non_empty;
    }
    total += count;
  }
  std::size_t expected_non_empty = 0;
  for (const double c : expected) expected_non_empty += c > 0;
  require(non_empty == expected_non_empty, "a value's bucket is missing from the proto");
  require(total == h.num(), "the bucket counts do not sum to num");

  const DecodedHistogram d = decode_histogram(h.encode());
  require(same(d.min, h.min()) && same(d.max, h.max()) && same(d.num, h.num()) &&
              same(d.sum, h.sum()) && same(d.sum_squares, h.sum_squares()),
          "the encoded min/max/num/sum/sum_squares differ from the histogram's");
  require(d.limits == b.limits && d.counts == b.counts, "the encoded buckets differ");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string tag(in.take(in.byte() & 31U));
  const auto wall_time = std::bit_cast<double>(in.u64());
  const auto step = static_cast<std::int64_t>(in.u64());
  std::vector<double> values;
  while (in.left() >= 8) values.push_back(std::bit_cast<double>(in.u64()));

  runhooks::Histogram histogram;
  for (const double v : values) histogram.add(v);
  check_histogram(histogram, values);

  // A tag that is not UTF-8 is refused (TensorBoard cannot read it back): that, and nothing else.
  if (!detail::is_utf8(tag)) {
    runhooks::SummaryEncoder refusing;
    bool refused = false;
    try {
      refusing.add_histogram(tag, histogram);
    } catch (const std::invalid_argument&) {
      refused = true;
    }
    require(refused, "a summary tag that is not UTF-8 was encoded");
    return 0;
  }

  // A Summary of up to 8 scalars (each value's low 4 bytes: every float bit pattern) and the
  // histogram, as SummarySaverHook writes it.
  runhooks::SummaryEncoder encoder;
  std::vector<float> scalars;
  for (std::size_t i = 0; i < values.size() && i < 8; ++i) {
    const auto low = static_cast<std::uint32_t>(std::bit_cast<std::uint64_t>(values[i]));
    scalars.push_back(std::bit_cast<float>(low));
    encoder.add_scalar(tag, scalars.back());
  }
  encoder.add_histogram(tag, histogram);
  std::string event_bytes;
  detail::put_event_header(event_bytes, wall_time, step);
  event_bytes += encoder.what();
  const runhooks::Event event = only_event(event_bytes);
  require(same(event.wall_time, wall_time) && event.step == step, "wall time or step changed");
  require(event.summary.size() == scalars.size() + 1, "a summary value was lost or added");
  for (std::size_t i = 0; i < scalars.size(); ++i) {
    const auto& v = event.summary[i];
    require(v.tag == tag && v.simple_value.has_value() && same_float(*v.simple_value, scalars[i]),
            "a scalar read back differently");
  }
  require(event.summary.back().tag == tag && !event.summary.back().simple_value,
          "the histogram value read back as something else");
  const auto raw_values = summary_values(event_bytes);
  require(raw_values.size() == scalars.size() + 1, "the summary's values do not decode");
  require(histo_of(raw_values.back()) == histogram.encode(), "the histo field is not encode()");

  // EventFileWriter::add_scalar's record, with a double's low 4 bytes as the float.
  const float scalar = values.empty() ? 0.0f : scalars.front();
  const runhooks::Event one = only_event(detail::encode_scalar_event(wall_time, step, tag, scalar));
  require(one.summary.size() == 1 && one.summary[0].tag == tag && one.step == step &&
              one.summary[0].simple_value && same_float(*one.summary[0].simple_value, scalar),
          "encode_scalar_event read back differently");

  // The first record of every event file, with the tag's bytes as version and writer name.
  const runhooks::Event first = only_event(detail::encode_file_version_event(wall_time, tag, tag));
  require(same(first.wall_time, wall_time) && first.step == 0 && first.file_version == tag &&
              first.source_writer == tag && first.summary.empty(),
          "encode_file_version_event read back differently");

  // SessionLog START, and CHECKPOINT with the tag's bytes as its path: each reads as one event
  // at its step, with no summary.
  std::string start;
  detail::put_event_header(start, wall_time, step);
  start += detail::encode_session_log_what(detail::SessionStatus::start);
  const runhooks::Event started = only_event(start);
  require(started.step == step && started.summary.empty() && started.session_log &&
              started.session_log->status == runhooks::SessionLog::Status::start,
          "SessionLog START read back differently");
  std::string saved;
  detail::put_event_header(saved, wall_time, step);
  saved += detail::encode_session_log_what(detail::SessionStatus::checkpoint, tag);
  const runhooks::Event checkpoint = only_event(saved);
  require(checkpoint.step == step && checkpoint.session_log &&
              checkpoint.session_log->status == runhooks::SessionLog::Status::checkpoint &&
              checkpoint.session_log->checkpoint_path == tag,
          "SessionLog CHECKPOINT read back differently");
  return 0;
}
