// Defines `runhooks::read_event_file` and its stream and memory forms, which read back a
// TensorFlow event file and check every record's framing and CRCs, so users and tests can verify
// what a writer produced.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/detail/crc32c.hpp>
#include <runhooks/error.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ios>
#include <istream>
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

// A `tensorflow.SessionLog`: START where a session began (TensorBoard then drops the events an
// earlier run wrote at or after its step), CHECKPOINT after a save. `status` holds the number
// in the file, which may be one this enumeration does not name.
struct SessionLog {
  enum class Status : std::int32_t { unspecified = 0, start = 1, stop = 2, checkpoint = 3 };
  Status status = Status::unspecified;
  std::string checkpoint_path;
  std::string msg;

  friend bool operator==(const SessionLog&, const SessionLog&) = default;
};

// The fields of a `tensorflow.Event` that scalar summaries and session logs use. A field that
// was absent in the file holds its proto3 default (0, empty); the other members of the `what`
// oneof are skipped.
struct Event {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;           // set only in a file's first event
  std::string source_writer;          // `source_metadata.writer`, likewise
  std::vector<SummaryValue> summary;  // the values of `Event.summary`, in file order
  std::optional<SessionLog> session_log;  // `Event.session_log`, if the event is one

  friend bool operator==(const Event&, const Event&) = default;
};

// A record that cannot be read: truncated, a CRC that does not match, or an `Event` that does
// not decode. `what()` names the source (the file's path) and the record's byte offset;
// `offset()` is that offset, counted from where reading began. TensorFlow's record reader
// reports the same cases as `DataLossError`.
class EventFileError : public Error {
 public:
  EventFileError(std::string_view source, std::uint64_t offset, std::string_view what)
      : Error("runhooks: event file " + std::string(source) + ": record at offset " +
              std::to_string(offset) + ": " + std::string(what)),
        offset_(offset) {}

  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::uint64_t offset_;
};

namespace detail {

// A cursor over one protobuf message; fails with std::invalid_argument, which the record loop
// turns into an EventFileError naming the record. It accepts what protobuf's own parsers
// accept, except groups (wire types 3 and 4: deprecated, never in an event file).
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) noexcept : bytes_(bytes) {}

  [[nodiscard]] bool done() const noexcept { return position_ == bytes_.size(); }

  // Bits beyond the 64th in a varint's tenth byte are dropped, as protobuf (C++ and upb) does.
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

  // A field's key. Field numbers run from 1 to 2^29 - 1; protobuf rejects the others.
  std::uint64_t key() {
    const std::uint64_t key = varint();
    if (const std::uint64_t field = key >> 3; field == 0 || field > max_field_number) {
      throw std::invalid_argument("invalid field number " + std::to_string(field));
    }
    return key;
  }

  std::uint64_t little_endian(int bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) {
      value |= std::uint64_t{next_byte()} << (8 * i);
    }
    return value;
  }

  // A view into the message: a length cannot make this allocate.
  std::string_view length_delimited() {
    const std::uint64_t length = varint();
    if (const std::size_t left = bytes_.size() - position_; length > left) {
      throw std::invalid_argument("length-delimited field of " + std::to_string(length) +
                                  " bytes runs past the end of its message (" +
                                  std::to_string(left) + " bytes left)");
    }
    const auto field = bytes_.substr(position_, static_cast<std::size_t>(length));
    position_ += field.size();
    return field;
  }

  // Unknown fields are skipped, as protobuf does, so files with other event kinds still read.
  void skip(std::uint64_t key) {
    switch (const std::uint64_t wire_type = key & 7U) {
      case 0: varint(); return;
      case 1: little_endian(8); return;
      case 2: length_delimited(); return;
      case 5: little_endian(4); return;
      case 3:
      case 4:
        throw std::invalid_argument("group (wire type " + std::to_string(wire_type) +
                                    ") in field " + std::to_string(key >> 3) +
                                    ": not supported");
      default:
        throw std::invalid_argument("invalid wire type " + std::to_string(wire_type) +
                                    " in field " + std::to_string(key >> 3));
    }
  }

 private:
  static constexpr std::uint64_t max_field_number = (std::uint64_t{1} << 29) - 1;

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
    const std::uint64_t key = in.key();
    if (key == wire_key(1, 2)) {
      value.tag = std::string(in.length_delimited());
    } else if (key == wire_key(2, 5)) {
      value.simple_value = std::bit_cast<float>(static_cast<std::uint32_t>(in.little_endian(4)));
    } else {
      // Another member of the `value` oneof replaces an earlier simple_value, as in protobuf.
      if (const auto field = key >> 3; field >= 3 && field <= 8 && field != 7) {
        value.simple_value.reset();
      }
      in.skip(key);
    }
  }
  return value;
}

// Field numbers: tensorflow/core/util/event.proto (source_metadata = 10 is in TF 2.x's copy and
// TensorBoard's; session_log = 7 holds SessionLog{status = 1, checkpoint_path = 2, msg = 3}).
// A message field may occur several times, which protobuf merges; so do we. Nesting is fixed
// (Event > Summary > Value, Event > SessionLog), so no input can make this recurse deeper.
inline Event decode_event(std::string_view bytes) {
  Event event;
  WireReader in(bytes);
  while (!in.done()) {
    const std::uint64_t key = in.key();
    if (key == wire_key(1, 1)) {
      event.wall_time = std::bit_cast<double>(in.little_endian(8));
    } else if (key == wire_key(2, 0)) {
      event.step = static_cast<std::int64_t>(in.varint());
    } else if (key == wire_key(3, 2)) {
      event.file_version = std::string(in.length_delimited());
    } else if (key == wire_key(10, 2)) {
      WireReader source_metadata(in.length_delimited());
      while (!source_metadata.done()) {
        const std::uint64_t metadata_key = source_metadata.key();
        if (metadata_key == wire_key(1, 2)) {
          event.source_writer = std::string(source_metadata.length_delimited());
        } else {
          source_metadata.skip(metadata_key);
        }
      }
    } else if (key == wire_key(7, 2)) {
      WireReader session_log(in.length_delimited());
      SessionLog& log = event.session_log ? *event.session_log : event.session_log.emplace();
      while (!session_log.done()) {
        const std::uint64_t log_key = session_log.key();
        if (log_key == wire_key(1, 0)) {
          // An enum is an int32 on the wire: a negative one is sign-extended to ten bytes.
          log.status = static_cast<SessionLog::Status>(static_cast<std::int32_t>(session_log.varint()));
        } else if (log_key == wire_key(2, 2)) {
          log.checkpoint_path = std::string(session_log.length_delimited());
        } else if (log_key == wire_key(3, 2)) {
          log.msg = std::string(session_log.length_delimited());
        } else {
          session_log.skip(log_key);
        }
      }
    } else if (key == wire_key(5, 2)) {
      WireReader summary(in.length_delimited());
      while (!summary.done()) {
        const std::uint64_t summary_key = summary.key();
        if (summary_key == wire_key(1, 2)) {
          event.summary.push_back(decode_summary_value(summary.length_delimited()));
        } else {
          summary.skip(summary_key);
        }
      }
    } else {
      in.skip(key);
    }
  }
  return event;
}

inline std::uint32_t load_u32(const char* bytes) noexcept {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    value |= std::uint32_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  }
  return value;
}

inline std::uint64_t load_u64(const char* bytes) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) {
    value |= std::uint64_t{static_cast<std::uint8_t>(bytes[i])} << (8 * i);
  }
  return value;
}

inline std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", static_cast<unsigned>(value));
  return text;
}

// Where records come from: `read(out, n)` stores up to n bytes at out and returns how many;
// fewer than n only at the end of the data. It throws on a read error.
class MemorySource {
 public:
  explicit MemorySource(std::string_view bytes) noexcept : rest_(bytes) {}
  std::size_t read(char* out, std::size_t n) noexcept {
    n = std::min(n, rest_.size());
    if (n != 0) {
      std::memcpy(out, rest_.data(), n);
    }
    rest_.remove_prefix(n);
    return n;
  }

 private:
  std::string_view rest_;
};

class StreamSource {
 public:
  StreamSource(std::istream& in, std::string_view source) noexcept : in_(in), source_(source) {}
  std::size_t read(char* out, std::size_t n) {
    in_.read(out, static_cast<std::streamsize>(n));
    if (in_.bad()) {
      throw std::system_error(std::make_error_code(std::io_errc::stream),
                              "runhooks::read_events: cannot read " + std::string(source_));
    }
    return static_cast<std::size_t>(in_.gcount());
  }

 private:
  std::istream& in_;
  std::string_view source_;
};

class FileSource {
 public:
  FileSource(std::FILE* file, std::string_view path) noexcept : file_(file), path_(path) {}
  std::size_t read(char* out, std::size_t n) {
    errno = 0;
    const std::size_t got = std::fread(out, 1, n, file_);
    if (got < n && std::ferror(file_) != 0) {
      throw std::system_error(errno != 0 ? errno : EIO, std::generic_category(),
                              "runhooks::read_event_file: cannot read " + std::string(path_));
    }
    return got;
  }

 private:
  std::FILE* file_;
  std::string_view path_;
};

// A record's data is read in pieces of at most this size, so that the memory it takes grows
// with the bytes that are really there, never with what a corrupt length field claims.
inline constexpr std::size_t record_read_chunk = std::size_t{1} << 16;

// Parses TFRecord framing (see `frame_record` in event_writer.hpp) and the events inside, until
// the source ends. `source_name` names the data in error messages.
template <class Source>
std::vector<Event> read_event_records(Source& source, std::string_view source_name) {
  std::vector<Event> events;
  std::uint64_t offset = 0;
  std::string data;
  for (;;) {
    const auto fail = [&](std::string_view what) {
      throw EventFileError(source_name, offset, what);
    };
    char header[12];
    const std::size_t header_size = source.read(header, sizeof header);
    if (header_size == 0) {
      return events;
    }
    // A reader that tails a live file would wait here; this one checks finished files, where
    // a partial record means lost data.
    if (header_size < sizeof header) {
      fail("truncated header (" + std::to_string(header_size) + " of 12 bytes)");
    }
    const std::uint32_t length_crc = masked_crc32c(crc32c(std::string_view(header, 8)));
    if (length_crc != load_u32(header + 8)) {
      fail("length CRC mismatch (stored " + hex32(load_u32(header + 8)) + ", computed " +
           hex32(length_crc) + ")");
    }
    const std::uint64_t length = load_u64(header);

    data.clear();
    while (data.size() < length) {
      const std::size_t have = data.size();
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(length - have, record_read_chunk));
      data.resize(have + want);
      const std::size_t got = source.read(data.data() + have, want);
      data.resize(have + got);
      if (got < want) {
        fail("truncated data (the header says " + std::to_string(length) + " bytes, " +
             std::to_string(data.size()) + " follow)");
      }
    }
    char footer[4];
    if (const std::size_t got = source.read(footer, sizeof footer); got < sizeof footer) {
      fail("truncated data CRC (" + std::to_string(got) + " of 4 bytes)");
    }
    const std::uint32_t data_crc = masked_crc32c(crc32c(data));
    if (data_crc != load_u32(footer)) {
      fail("data CRC mismatch (stored " + hex32(load_u32(footer)) + ", computed " +
           hex32(data_crc) + ")");
    }
    try {
      events.push_back(decode_event(data));
    } catch (const std::invalid_argument& error) {
      fail(std::string("malformed Event: ") + error.what());
    }
    offset += 16 + length;
  }
}

}  // namespace detail

// Reading event files
// -------------------
// Each function returns every event, in order, after checking each record's length CRC and
// data CRC. A truncated record, a CRC mismatch or an `Event` that does not decode throws
// `runhooks::EventFileError` naming the source and the record's byte offset; failing to open
// or read throws `std::system_error`. A length field, however large, costs no more memory than
// the bytes that really follow it; the events returned take memory in proportion to the data.

// Reads the file at `path`.
inline std::vector<Event> read_event_file(const std::filesystem::path& path) {
  struct Closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  const std::string name = path.string();
  errno = 0;
  const std::unique_ptr<std::FILE, Closer> file(std::fopen(name.c_str(), "rb"));
  if (!file) {
    throw std::system_error(errno != 0 ? errno : EIO, std::generic_category(),
                            "runhooks::read_event_file: cannot open " + name);
  }
  detail::FileSource source(file.get(), name);
  return detail::read_event_records(source, name);
}

// Reads `in` from its current position to its end; offsets in errors count from that position.
// `source` names the data in error messages. A stream error (badbit) throws std::system_error.
inline std::vector<Event> read_events(std::istream& in, std::string_view source = "stream") {
  detail::StreamSource stream(in, source);
  return detail::read_event_records(stream, source);
}

// Parses the bytes of an event file held in memory.
inline std::vector<Event> parse_events(std::string_view bytes, std::string_view source = "buffer") {
  detail::MemorySource memory(bytes);
  return detail::read_event_records(memory, source);
}

}  // namespace runhooks
