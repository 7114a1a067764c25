// The protobuf encoding of the Event messages runhooks writes (tensorflow/core/util/event.proto):
// the first event's file version, a scalar summary, a SessionLog; and the rule that keeps their
// strings UTF-8.
#pragma once

#include <runhooks/detail/config.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <runhooks/summary/detail/protobuf_wire.hpp>
#include <runhooks/summary/detail/utf8.hpp>

namespace runhooks::detail {

// Field numbers of tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto.
inline constexpr std::uint32_t event_wall_time_field = 1;     // double
inline constexpr std::uint32_t event_step_field = 2;          // int64
inline constexpr std::uint32_t event_file_version_field = 3;  // string, in oneof `what`
inline constexpr std::uint32_t event_summary_field = 5;       // Summary, in oneof `what`
inline constexpr std::uint32_t event_source_metadata_field = 10;  // SourceMetadata
inline constexpr std::uint32_t source_metadata_writer_field = 1;  // string
inline constexpr std::uint32_t summary_value_field = 1;       // repeated Summary.Value
inline constexpr std::uint32_t value_tag_field = 1;           // string
inline constexpr std::uint32_t value_simple_value_field = 2;  // float, in oneof `value`

// The first fields of every Event. Proto3 omits a field that holds its default, and so do we,
// so that our bytes match what protobuf itself serialises for the same message.
inline void put_event_header(std::string& out, double wall_time, std::int64_t step) {
  if (const auto bits = std::bit_cast<std::uint64_t>(wall_time); bits != 0) {
    put_key(out, event_wall_time_field, WireType::fixed64);
    put_little_endian(out, bits, 8);
  }
  if (step != 0) {
    put_key(out, event_step_field, WireType::varint);
    put_varint(out, static_cast<std::uint64_t>(step));  // negative: ten bytes, as protobuf does
  }
}

// TensorFlow 2.x's EventsWriter names itself in `source_metadata` of the first event, and
// TensorBoard reports that name (EventAccumulator.GetSourceWriter()); we do the same.
inline std::string encode_file_version_event(double wall_time, std::string_view file_version,
                       std::string_view source_writer) {
  std::string event;
  put_event_header(event, wall_time, 0);
  put_length_delimited(event, event_file_version_field, file_version);
  std::string source_metadata;
  put_length_delimited(source_metadata, source_metadata_writer_field, source_writer);
  put_length_delimited(event, event_source_metadata_field, source_metadata);
  return event;
}

// Appends Event{wall_time, step, summary {value {tag, simple_value}}} to `out`. The nested
// messages' sizes are computed first, so the bytes go straight to `out`: no temporary strings.
// Every field number here is below 16, so each key is one byte.
inline void put_scalar_event(std::string& out, double wall_time, std::int64_t step,
                             std::string_view tag, float simple_value) {
  // A member of a oneof has explicit presence, so 0.0f is written too: key + 4 bytes.
  const std::size_t value_size =
      (tag.empty() ? 0 : 1 + varint_size(tag.size()) + tag.size()) + 1 + 4;
  const std::size_t summary_size = 1 + varint_size(value_size) + value_size;
  put_event_header(out, wall_time, step);
  put_key(out, event_summary_field, WireType::length_delimited);
  put_varint(out, summary_size);
  put_key(out, summary_value_field, WireType::length_delimited);
  put_varint(out, value_size);
  if (!tag.empty()) put_length_delimited(out, value_tag_field, tag);
  put_key(out, value_simple_value_field, WireType::fixed32);
  put_little_endian(out, std::bit_cast<std::uint32_t>(simple_value), 4);
}

inline std::string encode_scalar_event(double wall_time, std::int64_t step, std::string_view tag,
                    float simple_value) {
  std::string event;
  put_scalar_event(event, wall_time, step, tag, simple_value);
  return event;
}

// Event.session_log = SessionLog{status, checkpoint_path} (tensorflow/core/util/event.proto):
// what TensorFlow's hooks write when a session starts (SummarySaverHook) and after each save
// (CheckpointSaverHook).
enum class SessionStatus : std::uint8_t { start = 1, stop = 2, checkpoint = 3 };
struct SessionLogFields {
  static constexpr std::uint32_t in_event = 7;         // Event.session_log, in oneof `what`
  static constexpr std::uint32_t status = 1;           // enum SessionStatus
  static constexpr std::uint32_t checkpoint_path = 2;  // string
};

// A checkpoint path that is not UTF-8 (a Latin-1 directory name) is written escaped, as
// escape_invalid_utf8 says: protobuf's parsers refuse the event otherwise, and TensorBoard reads
// nothing after it. Escaped rather than refused: the name is the file system's, which saves there
// whatever its bytes, and the SessionLog only reports it.
inline std::string encode_session_log_what(SessionStatus status, std::string_view checkpoint_path = {}) {
  std::string escaped;
  if (!is_utf8(checkpoint_path)) [[unlikely]] {
    escaped = escape_invalid_utf8(checkpoint_path);
    checkpoint_path = escaped;
  }
  std::string session_log;
  put_key(session_log, SessionLogFields::status, WireType::varint);
  put_varint(session_log, static_cast<std::uint8_t>(status));
  if (!checkpoint_path.empty())
    put_length_delimited(session_log, SessionLogFields::checkpoint_path, checkpoint_path);
  std::string what;
  put_length_delimited(what, SessionLogFields::in_event, session_log);
  return what;
}

// A summary tag must be UTF-8: protobuf's parsers refuse an event whose tag is not, and
// TensorBoard then reads nothing after it. Refused rather than escaped, as a name: the program
// chose it, and an escaped tag would be another tag. `where` names the caller.
[[noreturn, gnu::cold, gnu::noinline]] inline void throw_tag_not_utf8(std::string_view where,
                                                                     std::string_view tag) {
  const std::size_t at = invalid_utf8_at(tag);
  constexpr char digits[] = "0123456789abcdef";
  const auto byte = static_cast<std::uint8_t>(tag[at]);
  throw std::invalid_argument("runhooks: " + std::string(where) + ": the summary tag '" +
                              escape_invalid_utf8(tag) + "' is not UTF-8 (byte 0x" +
                              digits[byte >> 4] + digits[byte & 0x0F] + " at offset " +
                              std::to_string(at) +
                              "): TensorBoard cannot read an event holding it; name it in UTF-8.");
}

inline void check_summary_tag(std::string_view where, std::string_view tag) {
  if (!is_utf8(tag)) [[unlikely]] throw_tag_not_utf8(where, tag);
}

}  // namespace runhooks::detail
