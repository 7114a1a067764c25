// A TorchBackend's .pt file: written through a writer function of runhooks' own, so that every
// failure is a CheckpointError naming the file and the cause, with a CRC-32C of the whole file in
// the zip's archive comment, checked before anything is restored.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include <fcntl.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/detail/crc32c.hpp>

namespace runhooks::detail {

// The .pt file's checksum. libtorch's reader checks none of the zip's own CRC-32s (PyTorch builds
// miniz without the check), so a flipped byte in a parameter or an optimizer buffer was restored,
// broadcast and trained on. The writer records a CRC-32C (detail/crc32c.hpp, the `.arrays`
// format's) of every byte of the file before it in the zip archive comment, the zip format's own
// place for text after the end-of-central-directory record, which every zip reader (libtorch's,
// Python's zipfile) skips: "runhooks-crc32c:" and 8 lowercase hex digits.
inline constexpr std::string_view torch_checksum_label = "runhooks-crc32c:";
inline constexpr std::size_t torch_checksum_size = torch_checksum_label.size() + 8;
// The end-of-central-directory record without a comment: signature "PK\5\6", 16 bytes of
// fields, and the comment's length, 2 bytes, little-endian.
inline constexpr std::size_t zip_end_record_size = 22;
inline constexpr char zip_end_signature[4] = {'P', 'K', 5, 6};

inline bool is_zip_end_record(const char* record, std::size_t comment_size) noexcept {
  return std::memcmp(record, zip_end_signature, 4) == 0 &&
         static_cast<std::uint8_t>(record[20]) == (comment_size & 0xFF) &&
         static_cast<std::uint8_t>(record[21]) == (comment_size >> 8);
}

// Eight lowercase hex digits, as the archive's comment records a checksum (summary/event_reader.hpp
// has hex32, "0x"-prefixed, for its messages).
inline std::string checksum_hex(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(value));
  return text;
}

// `end` is the last 22 bytes of libtorch's archive, its end record with no comment, and `crc` the
// CRC-32C of every byte before them: sets the record's comment length and appends the comment.
inline void append_torch_checksum(std::string& out, std::string_view end, std::uint32_t crc,
                                  const std::filesystem::path& file) {
  if (end.size() != zip_end_record_size || !is_zip_end_record(end.data(), 0))
    throw CheckpointError("runhooks: " + quoted_path(file) +
                          ": libtorch's archive does not end with a zip end record; the checksum "
                          "has nowhere to go.");
  std::string record(end);
  record[20] = static_cast<char>(torch_checksum_size);
  crc = crc32c_extend(crc, record.data(), record.size());
  out += record;
  out += torch_checksum_label;
  out += checksum_hex(crc);
}

// Creates `file` for writing (truncated when it exists), refusing a symbolic link there: a planted
// link must not make us write elsewhere.
inline FileDescriptor create_torch_file(const std::filesystem::path& file) {
  check_file_operation(file);
  int fd;
  do {
    fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_file_error("cannot create", file, errno);
  return FileDescriptor(fd, file);
}

// The writer function OutputArchive::save_to(function) writes a .pt file through, so that a failed
// write is our error. libtorch's own file writer turns a short write (a full disk, a file-size
// limit) into an exception, and its destructor then writes the zip's end, fails again and throws
// from a destructor: std::terminate, "[enforce fail at inline_container.cc:672] unexpected pos N
// vs M". This one never fails inside libtorch (whose zip writer, miniz, is C): it keeps the first
// error, drops the bytes after it, and finish() throws it, a CheckpointError naming the file and
// the cause. It checksums the bytes as they go, a tensor's bytes in pieces while they are in the
// cache, and holds back the last 22, the zip's end record, for finish() to append the checksum.
class TorchArchiveFile {
 public:
  explicit TorchArchiveFile(const std::filesystem::path& file) : fd_(create_torch_file(file)) {}

  std::size_t write(const void* data, std::size_t size) noexcept {
    if (error_) return size;
    try {
      if (data == nullptr) {  // a record libtorch only reserves room for: zeros in the file
        tail_.append(size, '\0');
      } else if (size < direct_size) {
        tail_.append(static_cast<const char*>(data), size);
      } else {
        const auto* bytes = static_cast<const char*>(data);
        put(tail_.data(), tail_.size());
        tail_.clear();
        put(bytes, size - zip_end_record_size);
        tail_.assign(bytes + size - zip_end_record_size, zip_end_record_size);
      }
      if (tail_.size() >= buffer_size) {
        put(tail_.data(), tail_.size() - zip_end_record_size);
        tail_.erase(0, tail_.size() - zip_end_record_size);
      }
    } catch (...) {
      error_ = std::current_exception();
    }
    return size;  // never short: libtorch would throw through miniz and its destructor
  }

  // Appends the checksum and closes the file; throws the first failure to write.
  void finish() {
    if (error_) std::rethrow_exception(error_);
    if (tail_.size() < zip_end_record_size)
      throw CheckpointError("runhooks: " + quoted_path(fd_.path()) +
                            ": libtorch wrote no zip archive.");
    const std::size_t body = tail_.size() - zip_end_record_size;
    crc_ = crc32c_extend(crc_, tail_.data(), body);
    std::string out(tail_.data(), body);
    append_torch_checksum(out, std::string_view(tail_).substr(body), crc_, fd_.path());
    fd_.write_all(out.data(), out.size());
    fd_.close();
  }

 private:
  // Larger writes (a tensor's bytes) go to the file from where they are; smaller ones wait in
  // tail_ until buffer_size of them do: one write system call per MiB of small records.
  static constexpr std::size_t direct_size = std::size_t{64} << 10;
  static constexpr std::size_t buffer_size = std::size_t{1} << 20;

  void put(const char* bytes, std::size_t size) {
    for (std::size_t done = 0; done < size;) {
      const std::size_t piece = std::min(size - done, buffer_size);
      crc_ = crc32c_extend(crc_, bytes + done, piece);
      fd_.write_all(bytes + done, piece);
      done += piece;
    }
  }

  FileDescriptor fd_;
  std::string tail_;
  std::uint32_t crc_ = 0;
  std::exception_ptr error_;
};

// Writes `archive` to `file` with its checksum.
inline void save_torch_archive(torch::serialize::OutputArchive& archive,
                               const std::filesystem::path& file) {
  TorchArchiveFile out(file);
  archive.save_to([&out](const void* data, std::size_t size) { return out.write(data, size); });
  out.finish();
}

// `archive` serialized into memory with its checksum: the bytes a save to a file writes.
inline std::string torch_archive_bytes(torch::serialize::OutputArchive& archive,
                                       const std::filesystem::path& name_for_errors) {
  std::string bytes;
  archive.save_to([&bytes](const void* data, std::size_t size) {
    if (data == nullptr)
      bytes.append(size, '\0');
    else
      bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  if (bytes.size() < zip_end_record_size)
    throw CheckpointError("runhooks: " + quoted_path(name_for_errors) +
                          ": libtorch wrote no zip archive.");
  const std::size_t body = bytes.size() - zip_end_record_size;
  const std::string end = bytes.substr(body);
  bytes.resize(body);
  append_torch_checksum(bytes, end, crc32c_extend(0, bytes.data(), body), name_for_errors);
  return bytes;
}

// Throws a CheckpointError naming `file` unless `bytes`, the whole file, are a .pt archive whose
// checksum matches. An archive without one, which runhooks wrote before it recorded checksums
// (its last 22 bytes an end record with no comment), passes unchecked, as it restored before. So
// every single damaged byte of a checksummed file is caught, its end included: a changed label or
// comment length leaves neither form at the end.
inline void check_torch_archive(std::string_view bytes, const std::filesystem::path& file) {
  const std::size_t n = bytes.size();
  if (n >= zip_end_record_size + torch_checksum_size &&
      bytes.substr(n - torch_checksum_size, torch_checksum_label.size()) == torch_checksum_label) {
    const std::size_t body = n - torch_checksum_size;
    if (!is_zip_end_record(bytes.data() + body - zip_end_record_size, torch_checksum_size))
      throw CheckpointError("runhooks: " + quoted_path(file) +
                            " is corrupt: its checksum does not follow a zip end record.");
    std::uint32_t recorded = 0;
    for (const char c : bytes.substr(body + torch_checksum_label.size())) {
      const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (digit < 0)
        throw CheckpointError("runhooks: " + quoted_path(file) +
                              " is corrupt: its checksum is not 8 hex digits.");
      recorded = (recorded << 4) | static_cast<std::uint32_t>(digit);
    }
    const std::uint32_t computed = crc32c_extend(0, bytes.data(), body);
    if (computed != recorded)
      throw CheckpointError("runhooks: " + quoted_path(file) + " fails its checksum (CRC-32C " +
                            checksum_hex(recorded) + " recorded, " + checksum_hex(computed) +
                            " computed): the file is corrupt.");
    return;
  }
  if (n >= zip_end_record_size && is_zip_end_record(bytes.data() + n - zip_end_record_size, 0))
    return;
  throw CheckpointError("runhooks: " + quoted_path(file) +
                        " is torn or corrupt: it does not end with a zip end record.");
}

// Writes `bytes` to `file`: a CheckpointError naming the file and the cause on any failure.
inline void write_torch_bytes(const std::filesystem::path& file, std::string_view bytes) {
  FileDescriptor fd = create_torch_file(file);
  fd.write_all(bytes.data(), bytes.size());
  fd.close();
}

}  // namespace runhooks::detail
