// Defines `runhooks::read_event_file`, which reads back a TensorFlow event file and checks every
// record's framing and CRCs, so users and tests can verify what a writer produced.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/detail/crc32c.hpp>

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace runhooks {

// One `tensorflow.Summary.Value` as far as scalars go. `simple_value` is empty for values of
// the other kinds (images, histograms, TF2 tensor summaries), which are skipped.
struct SummaryValue {
  std::string tag;
  std::optional<float> simple_value;

  friend bool operator==(const SummaryValue&, const SummaryValue&) = default;
};

// The fields of a `tensorflow.Event` that scalar summaries use. A field that was absent in the
// file holds its proto3 default (0, empty); the other members of the `what` oneof are skipped.
struct Event {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;           // set only in a file's first event
  std::string source_writer;          // `source_metadata.writer`, likewise
  std::vector<SummaryValue> summary;  // the values of `Event.summary`, in file order

  friend bool operator==(const Event&, const Event&) = default;
};

namespace detail {

// Thrown with the file name and the byte offset of the record that could not be read.
[[noreturn]] inline void throw_bad_record(std::string_view source, std::size_t offset,
                     std::string_view what) {
  throw std::runtime_error("runhooks::read_event_file: " + std::string(source) + ": record at offset " +
               std::to_string(offset) + ": " + std::string(what));
}

// A cursor over one protobuf message; fails with std::invalid_argument, which the record loop
// turns into an error naming the file and the record.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) noexcept : bytes_(bytes) {}

  [[nodiscard]] bool done() const noexcept { return position_ == bytes_.size(); }

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const std::uint8_t byte = next_byte();
      value |= std::uint64_t{byte & 0x7FU} << shift;
      if ((byte & 0x80U) == 0) {
        return value;
      }
    }
    throw std::invalid_argument("varint longer than 10 bytes");
  }

  std::uint64_t little_endian(int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) {
      value |= std::uint64_t{next_byte()} << (8 * i);
    }
    return value;
  }

  std::string_view length_delimited() {
    const std::uint64_t length = varint();
    if (length > bytes_.size() - position_) {
      throw std::invalid_argument("length-delimited field runs past the end of its message");
    }
    const auto field = bytes_.substr(position_, static_cast<std::size_t>(length));
    position_ += field.size();
    return field;
  }

  // Unknown fields are skipped, as protobuf does, so files with other event kinds still read.
  void skip(std::uint64_t wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: little_endian(8); return;
      case 2: length_delimited(); return;
      case 5: little_endian(4); return;
      default: throw std::invalid_argument("unsupported wire type " + std::to_string(wire_type));
    }
  }

 private:
  std::uint8_t next_byte() {
    if (position_ == bytes_.size()) {
      throw std::invalid_argument("message ends inside a field");
    }
    return static_cast<std::uint8_t>(bytes_[position_++]);
  }

  std::string_view bytes_;
  std::size_t position_ = 0;
};

// A field number and wire type as they appear in a key, e.g. {1, 2} for `string tag = 1`.
constexpr std::uint64_t wire_key(std::uint64_t field, std::uint64_t wire_type) noexcept {
  return (field << 3) | wire_type;
}

// Field numbers: tensorflow/core/framework/summary.proto.
inline SummaryValue decode_summary_value(std::string_view bytes) {
  SummaryValue value;
  WireReader in(bytes);
  while (!in.done()) {
    const std::uint64_t key = in.varint();
    if (key == wire_key(1, 2)) {
      value.tag = std::string(in.length_delimited());
    } else if (key == wire_key(2, 5)) {
      value.simple_value = std::bit_cast<float>(static_cast<std::uint32_t>(in.little_endian(4)));
    } else {
      // Another member of the `value` oneof replaces an earlier simple_value, as in protobuf.
      if (const auto field = key >> 3; field >= 3 && field <= 8 && field != 7) {
        value.simple_value.reset();
      }
      in.skip(key & 7U);
    }
  }
  return value;
}

// Field numbers: tensorflow/core/util/event.proto (source_metadata = 10 is in TF 2.x's copy and
// TensorBoard's). A message field may occur several times, which protobuf merges; so do we.
inline Event decode_event(std::string_view bytes) {
  Event event;
  WireReader in(bytes);
  while (!in.done()) {
    const std::uint64_t key = in.varint();
    if (key == wire_key(1, 1)) {
      event.wall_time = std::bit_cast<double>(in.little_endian(8));
    } else if (key == wire_key(2, 0)) {
      event.step = static_cast<std::int64_t>(in.varint());
    } else if (key == wire_key(3, 2)) {
      event.file_version = std::string(in.length_delimited());
    } else if (key == wire_key(10, 2)) {
      WireReader source_metadata(in.length_delimited());
      while (!source_metadata.done()) {
        const std::uint64_t metadata_key = source_metadata.varint();
        if (metadata_key == wire_key(1, 2)) {
          event.source_writer = std::string(source_metadata.length_delimited());
        } else {
          source_metadata.skip(metadata_key & 7U);
        }
      }
    } else if (key == wire_key(5, 2)) {
      WireReader summary(in.length_delimited());
      while (!summary.done()) {
        const std::uint64_t summary_key = summary.varint();
        if (summary_key == wire_key(1, 2)) {
          event.summary.push_back(decode_summary_value(summary.length_delimited()));
        } else {
          summary.skip(summary_key & 7U);
        }
      }
    } else {
      in.skip(key & 7U);
    }
  }
  return event;
}

inline std::uint32_t load_u32(std::string_view bytes) noexcept {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    value |= std::uint32_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  }
  return value;
}

inline std::uint64_t load_u64(std::string_view bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= std::uint64_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  }
  return value;
}

// Parses TFRecord framing (see `frame_record` in event_writer.hpp) and the events inside.
// `source` names the data in error messages.
inline std::vector<Event> parse_event_records(std::string_view bytes, std::string_view source) {
  std::vector<Event> events;
  std::size_t offset = 0;
  while (offset < bytes.size()) {
    const std::string_view rest = bytes.substr(offset);
    // A reader that tails a live file would wait here; this one checks finished files, where
    // a partial record means lost data.
    if (rest.size() < 12) {
      throw_bad_record(source, offset, "truncated header");
    }
    const std::string_view length_bytes = rest.substr(0, 8);
    if (masked_crc32c(crc32c(length_bytes)) != load_u32(rest.substr(8))) {
      throw_bad_record(source, offset, "length CRC mismatch");
    }
    const std::uint64_t length = load_u64(length_bytes);
    if (rest.size() < 16 || length > rest.size() - 16) {
      throw_bad_record(source, offset, "truncated data (length " + std::to_string(length) + ")");
    }
    const std::string_view data = rest.substr(12, static_cast<std::size_t>(length));
    if (masked_crc32c(crc32c(data)) != load_u32(rest.substr(12 + data.size()))) {
      throw_bad_record(source, offset, "data CRC mismatch");
    }
    try {
      events.push_back(decode_event(data));
    } catch (const std::invalid_argument& error) {
      throw_bad_record(source, offset, std::string("malformed Event: ") + error.what());
    }
    offset += 16 + data.size();
  }
  return events;
}

}  // namespace detail

// Reads every event of a TensorFlow event file, in order.
//
// Each record's length CRC and data CRC are checked. A mismatch, a truncated record or an
// undecodable `Event` throws `std::runtime_error` naming the file and the record's byte offset;
// failing to read the file throws `std::system_error`. The whole file is read into memory.
inline std::vector<Event> read_event_file(const std::filesystem::path& path) {
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  errno = 0;
  const std::unique_ptr<std::FILE, Closer> file(std::fopen(path.string().c_str(), "rb"));
  const auto fail = [&](const char* what) {
    const int error = errno != 0 ? errno : EIO;
    throw std::system_error(error, std::generic_category(),
                std::string("runhooks::read_event_file: ") + what + " " + path.string());
  };
  if (!file) {
    fail("cannot open");
  }
  std::string bytes;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0;) {
    bytes.append(buffer, n);
  }
  if (std::ferror(file.get()) != 0) {
    fail("cannot read");
  }
  return detail::parse_event_records(bytes, path.string());
}

}  // namespace runhooks
