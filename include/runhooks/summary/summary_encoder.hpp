// Defines `runhooks::SummaryEncoder`, the protobuf encoding of a Summary holding scalars and
// histograms, for EventFileWriter::add_event.
#pragma once

#include <runhooks/detail/config.hpp>

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include <runhooks/summary/detail/event_encoding.hpp>
#include <runhooks/summary/detail/protobuf_wire.hpp>
#include <runhooks/summary/histogram.hpp>

namespace runhooks {
namespace detail {
inline constexpr std::uint32_t value_histo_field = 5;  // Summary.Value.histo, in oneof `value`
}  // namespace detail

// A Summary proto built value by value, as tf.compat.v1.summary.merge_all() merges its values
// into one: add_scalar (Value.simple_value, a float) and add_histogram (Value.histo). what()
// is the Event field that carries it, for EventFileWriter::add_event. A tag that is not UTF-8
// is std::invalid_argument naming it, and nothing is added (EventFileWriter's rule).
class SummaryEncoder {
 public:
  void add_scalar(std::string_view tag, float value) {
    detail::check_summary_tag("SummaryEncoder::add_scalar", tag);
    std::string v;
    if (!tag.empty()) detail::put_length_delimited(v, detail::value_tag_field, tag);
    detail::put_key(v, detail::value_simple_value_field, detail::WireType::fixed32);
    detail::put_little_endian(v, std::bit_cast<std::uint32_t>(value), 4);
    detail::put_length_delimited(summary_, detail::summary_value_field, v);
  }

  void add_histogram(std::string_view tag, const Histogram& histogram) {
    detail::check_summary_tag("SummaryEncoder::add_histogram", tag);
    std::string v;
    if (!tag.empty()) detail::put_length_delimited(v, detail::value_tag_field, tag);
    detail::put_length_delimited(v, detail::value_histo_field, histogram.encode());
    detail::put_length_delimited(summary_, detail::summary_value_field, v);
  }

  // The Summary message's bytes.
  const std::string& summary() const noexcept { return summary_; }

  // Event.summary, tag and length included.
  std::string what() const {
    std::string out;
    detail::put_length_delimited(out, detail::event_summary_field, summary_);
    return out;
  }

 private:
  std::string summary_;
};

}  // namespace runhooks
