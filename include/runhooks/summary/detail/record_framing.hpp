// TFRecord framing, the container of an event file's records: each record's length and data with
// their masked CRC-32Cs, framed in steps so that the CRCs are computed off the adding thread.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <runhooks/detail/crc32c.hpp>
#include <runhooks/summary/detail/protobuf_wire.hpp>

namespace runhooks::detail {

// TFRecord framing (tensorflow/core/lib/io/record_writer.h): uint64 length, masked CRC-32C of
// those 8 bytes, the data, masked CRC-32C of the data; all little-endian.
// A record is framed in three steps, so that its data can be encoded in place and its CRCs
// computed later, off the thread that made it: begin_record() appends the 12-byte header with
// the length and its CRC left zero, the caller appends the data, end_record() fills in the
// length and appends the data CRC's 4 bytes, zero; seal_records() computes every CRC of a run of
// such records.
inline constexpr std::size_t record_header_size = 12;
inline constexpr std::size_t record_framing_size = 16;

inline std::size_t begin_record(std::string& out) {
  const std::size_t at = out.size();
  out.append(record_header_size, '\0');
  return at;
}

inline void end_record(std::string& out, std::size_t at) {
  store_little_endian(out.data() + at, out.size() - at - record_header_size, 8);
  out.append(4, '\0');
}

// Fills in the CRCs of `records`, whole records made by begin_record() and end_record().
inline void seal_records(std::string& records) noexcept {
  char* const bytes = records.data();
  for (std::size_t at = 0; at + record_framing_size <= records.size();) {
    std::uint64_t length = 0;
    for (int i = 0; i < 8; ++i)
      length |= std::uint64_t{static_cast<std::uint8_t>(bytes[at + static_cast<std::size_t>(i)])} << (8 * i);
    store_little_endian(bytes + at + 8, masked_crc32c(crc32c(std::string_view(bytes + at, 8))), 4);
    const auto size = static_cast<std::size_t>(length);
    const std::size_t data = at + record_header_size;
    store_little_endian(bytes + data + size, masked_crc32c(crc32c(std::string_view(bytes + data, size))), 4);
    at = data + size + 4;
  }
}

inline std::string frame_record(std::string_view data) {
  std::string record;
  record.reserve(data.size() + record_framing_size);
  const std::size_t at = begin_record(record);
  record.append(data);
  end_record(record, at);
  seal_records(record);
  return record;
}

}  // namespace runhooks::detail
