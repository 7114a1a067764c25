// FlatArrayWriter and FlatArrayReader: a backend that holds a few flat arrays writes them to one
// checkpoint file and reads them back, each array named, sized and checksummed.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/crc.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/detail/crc32c.hpp>

namespace runhooks {

// The element types a flat array may hold: fixed-size integers and IEEE floating point.
template <class T>
concept FlatArrayElement =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int8_t> ||
    std::same_as<T, std::uint8_t> || std::same_as<T, std::int16_t> ||
    std::same_as<T, std::uint16_t> || std::same_as<T, std::int32_t> ||
    std::same_as<T, std::uint32_t> || std::same_as<T, std::int64_t> ||
    std::same_as<T, std::uint64_t>;

namespace detail {

// The file format, version 2, in the byte order of the machine that wrote it (recorded, and a
// file of the other order is refused):
//   header   "RHARRAYS" | u32 version | u32 0x01020304 (byte order)
//   array    u32 "ARR1" | u32 name bytes | u32 element type | u32 element size | u64 elements |
//            u32 CRC of the data | u32 CRC of this record's fields (this one as 0) and name |
//            name | data
//   trailer  "RHAEND01" | u64 number of arrays | u32 CRC of every record's own CRC, in order |
//            u32 0
// A file cut anywhere lacks its trailer or a complete record, and is refused; a changed byte
// fails a CRC. Version 2's CRC is CRC-32C (Castagnoli, detail/crc32c.hpp: the CPU's instruction,
// 10-20 GB/s); version 1, the same layout, used zlib's CRC-32 (Boost.CRC's crc_32_type,
// 0.2-0.3 GB/s, and no instruction computes it). The writer writes version 2; the reader reads
// both.
inline constexpr char flat_arrays_magic[8] = {'R', 'H', 'A', 'R', 'R', 'A', 'Y', 'S'};
inline constexpr char flat_arrays_end[8] = {'R', 'H', 'A', 'E', 'N', 'D', '0', '1'};
inline constexpr std::uint32_t flat_arrays_version = 2;
inline constexpr std::uint32_t flat_arrays_oldest_version = 1;
inline constexpr std::uint32_t flat_arrays_byte_order = 0x01020304u;
inline constexpr std::uint32_t flat_arrays_record = 0x31525241u;  // "ARR1" little-endian

template <class T>
constexpr std::uint32_t element_type_code() {
  if constexpr (std::is_floating_point_v<T>)
    return 0x100u + sizeof(T);
  else if constexpr (std::is_signed_v<T>)
    return 0x200u + sizeof(T);
  else
    return 0x300u + sizeof(T);
}

inline std::string element_type_name(std::uint32_t code) {
  const std::string bits = std::to_string((code & 0xffu) * 8);
  switch (code >> 8) {
    case 1: return "float" + bits;
    case 2: return "int" + bits;
    case 3: return "uint" + bits;
    default: return "unknown type " + std::to_string(code);
  }
}

struct FlatArrayRecord {
  std::uint32_t record;
  std::uint32_t name_size;
  std::uint32_t type;
  std::uint32_t element_size;
  std::uint64_t count;
  std::uint32_t data_crc;
  std::uint32_t header_crc;
};
static_assert(sizeof(FlatArrayRecord) == 32);

struct FlatArrayTrailer {
  char magic[8];
  std::uint64_t arrays;
  std::uint32_t records_crc;
  std::uint32_t zero;
};
static_assert(sizeof(FlatArrayTrailer) == 24);

// The CRC of format `version` of the bytes whose CRC is `crc` (0 for none) followed by data.
inline std::uint32_t flat_arrays_crc(std::uint32_t version, std::uint32_t crc, const void* data,
                                     std::size_t size) noexcept {
  return version == 1 ? boost_crc_extend<boost::crc_32_type>(crc, data, size)
                      : crc32c_extend(crc, data, size);
}

inline std::uint32_t record_header_crc(std::uint32_t version, FlatArrayRecord record,
                                       std::string_view name) noexcept {
  record.header_crc = 0;
  return flat_arrays_crc(version, flat_arrays_crc(version, 0, &record, sizeof record), name.data(),
                         name.size());
}

// The writer checksums and writes an array in pieces of this size, each while it is still in
// the cache: one pass over memory instead of two (measured on 64 MiB: the write phase takes ~8%
// less than a CRC pass then a write pass; 4 MiB pieces tie, 16 MiB ones lose the cache).
inline constexpr std::size_t flat_arrays_write_piece = std::size_t{1} << 20;

}  // namespace detail

// Writes named arrays to one file, as a checkpointable backend's save(prefix) does:
//
//   void save(const std::filesystem::path& prefix) const {
//     runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
//     out.add("weights", weights_);     // any contiguous range of a FlatArrayElement
//     out.add("global_step", step_);    // or a single value
//     out.close();                      // writes the trailer; throws on any I/O error
//   }
//
// Every write is checked: a full disk or a file-size limit throws CheckpointError naming the file
// and the cause. A writer destroyed without close() leaves a file that readers refuse. The
// library fsyncs the files of a checkpoint after save() returns; the writer does not.
class FlatArrayWriter {
 public:
  explicit FlatArrayWriter(std::filesystem::path file)
      : fd_(detail::FileDescriptor::create(file)), file_(std::move(file)) {
    char header[16];
    std::memcpy(header, detail::flat_arrays_magic, 8);
    std::memcpy(header + 8, &detail::flat_arrays_version, 4);
    std::memcpy(header + 12, &detail::flat_arrays_byte_order, 4);
    fd_.write_all(header, sizeof header);
    offset_ = sizeof header;
  }

  FlatArrayWriter(FlatArrayWriter&&) noexcept = default;
  FlatArrayWriter& operator=(FlatArrayWriter&&) noexcept = default;

  // The record goes out first with its CRCs zero (a file cut before they are filled in is
  // refused like any other torn file); the data follows piece by piece, each checksummed and
  // written while in the cache; then the record is written again, complete, at its place.
  template <FlatArrayElement T>
  FlatArrayWriter& add(std::string_view name, std::span<const T> values) {
    constexpr std::uint32_t version = detail::flat_arrays_version;
    check_name(name);
    detail::FlatArrayRecord record{
        .record = detail::flat_arrays_record,
        .name_size = static_cast<std::uint32_t>(name.size()),
        .type = detail::element_type_code<T>(),
        .element_size = sizeof(T),
        .count = values.size(),
        .data_crc = 0,
        .header_crc = 0,
    };
    const std::uint64_t record_at = offset_;
    write(&record, sizeof record);
    write(name.data(), name.size());
    const auto* data = reinterpret_cast<const char*>(values.data());
    for (std::size_t done = 0, size = values.size_bytes(); done < size;) {
      const std::size_t piece = std::min(size - done, detail::flat_arrays_write_piece);
      record.data_crc = detail::flat_arrays_crc(version, record.data_crc, data + done, piece);
      write(data + done, piece);
      done += piece;
    }
    record.header_crc = detail::record_header_crc(version, record, name);
    fd_.write_all_at(&record, sizeof record, record_at);
    records_crc_ = detail::flat_arrays_crc(version, records_crc_, &record.header_crc,
                                           sizeof record.header_crc);
    names_.emplace_back(name);
    return *this;
  }

  // A contiguous range (std::vector, std::array, C array, span) of FlatArrayElement.
  template <std::ranges::contiguous_range R>
    requires FlatArrayElement<std::remove_cv_t<std::ranges::range_value_t<R>>>
  FlatArrayWriter& add(std::string_view name, const R& values) {
    using T = std::remove_cv_t<std::ranges::range_value_t<R>>;
    return add<T>(name, std::span<const T>(std::ranges::data(values), std::ranges::size(values)));
  }

  // One value, stored as an array of one element.
  template <FlatArrayElement T>
  FlatArrayWriter& add(std::string_view name, const T& value) {
    return add<T>(name, std::span<const T>(&value, 1));
  }

  // Writes the trailer and closes the file. Throws CheckpointError on any I/O error.
  void close() {
    detail::FlatArrayTrailer trailer{};
    std::memcpy(trailer.magic, detail::flat_arrays_end, 8);
    trailer.arrays = names_.size();
    trailer.records_crc = records_crc_;
    write(&trailer, sizeof trailer);
    fd_.close();
  }

  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  void check_name(std::string_view name) const {
    if (name.empty() || name.size() > 4096)
      throw CheckpointError("runhooks: FlatArrayWriter::add: an array name must have 1 to 4096 "
                            "bytes, got " + std::to_string(name.size()) + " (file " +
                            detail::quoted_path(file_) + ").");
    for (const std::string& existing : names_)
      if (existing == name)
        throw CheckpointError("runhooks: FlatArrayWriter::add: array '" + std::string(name) +
                              "' added twice to " + detail::quoted_path(file_) + ".");
  }

  void write(const void* data, std::size_t size) {
    fd_.write_all(data, size);
    offset_ += size;
  }

  detail::FileDescriptor fd_;
  std::filesystem::path file_;
  std::vector<std::string> names_;
  std::uint64_t offset_ = 0;       // bytes written so far
  std::uint32_t records_crc_ = 0;  // over every record's header CRC, in order
};

// Reads a whole file written by FlatArrayWriter and checks all of it before handing out any
// array: structure, byte order, version, every CRC, the trailer. A torn, truncated, corrupted or
// foreign file is a CheckpointError naming the file and what is wrong, never garbage values.
class FlatArrayReader {
 public:
  explicit FlatArrayReader(std::filesystem::path file)
      : file_(std::move(file)), data_(detail::read_whole_file(file_)) {
    parse();
  }

  const std::filesystem::path& file() const noexcept { return file_; }

  bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  std::vector<std::string> names() const {
    std::vector<std::string> names;
    for (const Entry& entry : entries_) names.emplace_back(entry.name);
    return names;
  }

  // Number of elements of array `name`.
  std::size_t size(std::string_view name) const { return get_entry(name).count; }

  // Copies array `name` into `out`, whose size must equal the array's.
  template <FlatArrayElement T>
  void read(std::string_view name, std::span<T> out) const {
    const Entry& entry = checked_entry<T>(name);
    if (entry.count != out.size())
      fail("array '" + std::string(name) + "' has " + std::to_string(entry.count) +
           " elements, the backend expects " + std::to_string(out.size()));
    if (!out.empty()) std::memcpy(out.data(), entry.data, out.size_bytes());
  }
  template <std::ranges::contiguous_range R>
    requires FlatArrayElement<std::ranges::range_value_t<R>> &&
             (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>)
  void read(std::string_view name, R& out) const {
    using T = std::ranges::range_value_t<R>;
    read<T>(name, std::span<T>(std::ranges::data(out), std::ranges::size(out)));
  }

  // Array `name` as a vector of any size.
  template <FlatArrayElement T>
  std::vector<T> get(std::string_view name) const {
    const Entry& entry = checked_entry<T>(name);
    std::vector<T> values(static_cast<std::size_t>(entry.count));
    if (!values.empty()) std::memcpy(values.data(), entry.data, values.size() * sizeof(T));
    return values;
  }

  // Array `name`, which must hold exactly one element.
  template <FlatArrayElement T>
  T scalar(std::string_view name) const {
    T value{};
    read<T>(name, std::span<T>(&value, 1));
    return value;
  }

 private:
  struct Entry {
    std::string_view name;
    std::uint32_t type;
    std::uint64_t count;
    const char* data;
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw CheckpointError("runhooks: checkpoint file " + detail::quoted_path(file_) + ": " + what +
                          ".");
  }

  void parse() {
    const std::size_t size = data_.size();
    if (size < 16 || std::memcmp(data_.data(), detail::flat_arrays_magic, 8) != 0)
      fail("not a runhooks flat-array file (no RHARRAYS header)");
    std::uint32_t version, order;
    std::memcpy(&version, data_.data() + 8, 4);
    std::memcpy(&order, data_.data() + 12, 4);
    if (order != detail::flat_arrays_byte_order)
      fail("written on a machine of the other byte order");
    if (version < detail::flat_arrays_oldest_version || version > detail::flat_arrays_version)
      fail("format version " + std::to_string(version) + "; this runhooks reads versions " +
           std::to_string(detail::flat_arrays_oldest_version) + " to " +
           std::to_string(detail::flat_arrays_version));
    std::size_t at = 16;
    std::uint32_t records_crc = 0;
    for (;;) {
      if (size - at >= sizeof(detail::FlatArrayTrailer) &&
          std::memcmp(data_.data() + at, detail::flat_arrays_end, 8) == 0)
        break;
      if (size - at < sizeof(detail::FlatArrayRecord))
        fail("truncated or torn after " + std::to_string(entries_.size()) +
             " arrays (no end marker)");
      detail::FlatArrayRecord record;
      std::memcpy(&record, data_.data() + at, sizeof record);
      at += sizeof record;
      if (record.record != detail::flat_arrays_record)
        fail("damaged: array record " + std::to_string(entries_.size()) + " has no ARR1 marker");
      if (record.name_size > size - at)
        fail("truncated or torn inside array record " + std::to_string(entries_.size()));
      const std::string_view name(data_.data() + at, record.name_size);
      if (detail::record_header_crc(version, record, name) != record.header_crc)
        fail("damaged: the header of array record " + std::to_string(entries_.size()) +
             " fails its checksum");
      at += record.name_size;
      if (record.element_size == 0 || record.element_size != (record.type & 0xffu) ||
          record.count > (size - at) / record.element_size)
        fail("truncated or torn inside array '" + std::string(name) + "'");
      const std::size_t bytes = static_cast<std::size_t>(record.count) * record.element_size;
      if (detail::flat_arrays_crc(version, 0, data_.data() + at, bytes) != record.data_crc)
        fail("array '" + std::string(name) + "' fails its checksum");
      if (find(name) != nullptr) fail("array '" + std::string(name) + "' appears twice");
      entries_.push_back(Entry{name, record.type, record.count, data_.data() + at});
      records_crc = detail::flat_arrays_crc(version, records_crc, &record.header_crc,
                                            sizeof record.header_crc);
      at += bytes;
    }
    detail::FlatArrayTrailer trailer;
    std::memcpy(&trailer, data_.data() + at, sizeof trailer);
    at += sizeof trailer;
    if (trailer.arrays != entries_.size() || trailer.records_crc != records_crc ||
        trailer.zero != 0)
      fail("damaged: the end marker does not match the arrays before it");
    if (at != size) fail("damaged: " + std::to_string(size - at) + " bytes after the end marker");
  }

  const Entry* find(std::string_view name) const noexcept {
    for (const Entry& entry : entries_)
      if (entry.name == name) return &entry;
    return nullptr;
  }

  const Entry& get_entry(std::string_view name) const {
    const Entry* entry = find(name);
    if (entry == nullptr) fail("has no array '" + std::string(name) + "'");
    return *entry;
  }

  template <class T>
  const Entry& checked_entry(std::string_view name) const {
    const Entry& entry = get_entry(name);
    if (entry.type != detail::element_type_code<T>())
      fail("array '" + std::string(name) + "' holds " + detail::element_type_name(entry.type) +
           ", the backend expects " + detail::element_type_name(detail::element_type_code<T>()));
    return entry;
  }

  std::filesystem::path file_;
  std::string data_;
  std::vector<Entry> entries_;
};

}  // namespace runhooks
