// POSIX file operations for checkpoints, each failing with a CheckpointError that names the path
// and the cause: whole writes, fsync of files and directories, unique names, listing by prefix.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>

namespace runhooks::detail {

inline std::string quoted_path(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

// A seam for the deletion-safety property test (tests/checkpoint/), as LevelDB's fault-injection
// Env: called before every operation that changes a checkpoint directory (create, write, sync,
// link, rename, remove, lock). When it returns false the process counts as killed there: a loud
// operation throws, a quiet one does nothing, and so nothing more reaches the disk. Null, the
// default, costs one load per system call.
using FileOperationGate = bool (*)() noexcept;
inline std::atomic<FileOperationGate>& file_operation_gate() noexcept {
  static std::atomic<FileOperationGate> gate{nullptr};
  return gate;
}
inline bool file_operation_allowed() noexcept {
  const FileOperationGate gate = file_operation_gate().load(std::memory_order_relaxed);
  return gate == nullptr || gate();
}
inline void check_file_operation(const std::filesystem::path& path) {
  if (!file_operation_allowed())
    throw CheckpointError("runhooks: file operation on " + quoted_path(path) +
                          " refused by the test gate (a simulated kill).");
}

inline std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

// "runhooks: <action> '<path>': <strerror(error)>".
[[noreturn]] inline void throw_file_error(std::string_view action, const std::filesystem::path& path,
                                          int error) {
  throw CheckpointError("runhooks: " + std::string(action) + " " + quoted_path(path) + ": " +
                        errno_text(error));
}

// An open file descriptor, closed on destruction. close() reports errors (a write the kernel
// deferred can fail there); the destructor cannot, and is for error paths only.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  FileDescriptor(int fd, std::filesystem::path path) noexcept : fd_(fd), path_(std::move(path)) {}
  FileDescriptor(FileDescriptor&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
      path_ = std::move(other.path_);
    }
    return *this;
  }
  ~FileDescriptor() { reset(); }

  // Creates (or truncates) a file for writing, mode 0644.
  static FileDescriptor create(const std::filesystem::path& path) {
    check_file_operation(path);
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw_file_error("cannot create", path, errno);
    return FileDescriptor(fd, path);
  }

  // Creates a file that must not exist yet, mode 0644: a name that is already there, a
  // symbolic link planted at it included, is an error and is neither followed nor truncated
  // (issue 29). For the fresh temporaries runhooks names itself (a random token in each name).
  static FileDescriptor create_new(const std::filesystem::path& path) {
    check_file_operation(path);
    int fd;
    do {
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw_file_error("cannot create", path, errno);
    return FileDescriptor(fd, path);
  }

  // Opens an existing file or directory read-only (for reading, or for fsync).
  static FileDescriptor open_read(const std::filesystem::path& path, bool directory = false) {
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw_file_error("cannot open", path, errno);
    return FileDescriptor(fd, path);
  }

  int get() const noexcept { return fd_; }
  const std::filesystem::path& path() const noexcept { return path_; }

  // Writes all n bytes, retrying short writes and EINTR.
  void write_all(const void* data, std::size_t n) {
    check_file_operation(path_);
    const auto* bytes = static_cast<const unsigned char*>(data);
    while (n > 0) {
      const ::ssize_t written = ::write(fd_, bytes, n);
      if (written < 0) {
        if (errno == EINTR) continue;
        throw_file_error("writing", path_, errno);
      }
      bytes += written;
      n -= static_cast<std::size_t>(written);
    }
  }

  // Writes all n bytes at `offset`, leaving the file offset where it was (pwrite(2)).
  void write_all_at(const void* data, std::size_t n, std::uint64_t offset) {
    check_file_operation(path_);
    const auto* bytes = static_cast<const unsigned char*>(data);
    while (n > 0) {
      const ::ssize_t written = ::pwrite(fd_, bytes, n, static_cast<::off_t>(offset));
      if (written < 0) {
        if (errno == EINTR) continue;
        throw_file_error("writing", path_, errno);
      }
      bytes += written;
      n -= static_cast<std::size_t>(written);
      offset += static_cast<std::uint64_t>(written);
    }
  }

  void sync() {
    check_file_operation(path_);
    int result;
    do {
      result = ::fsync(fd_);
    } while (result != 0 && errno == EINTR);
    // A directory on a file system that cannot sync one reports EINVAL: nothing to make durable.
    if (result != 0 && errno != EINVAL) throw_file_error("fsync of", path_, errno);
  }

  void close() {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) throw_file_error("closing", path_, errno);
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::filesystem::path path_;
};

// Makes a file's data, or a directory's entries (names created, renamed, removed), durable.
inline void fsync_path(const std::filesystem::path& path, bool directory = false) {
  FileDescriptor fd = FileDescriptor::open_read(path, directory);
  fd.sync();
  fd.close();
}

// Writes `text` to `path`, a new file (FileDescriptor::create_new: nothing may be there yet),
// fsyncs and closes it. Its callers write fresh temporaries: the write probe, the state file's
// temporary and a copy made where hard links fail.
inline void write_file_durably(const std::filesystem::path& path, std::string_view text) {
  FileDescriptor fd = FileDescriptor::create_new(path);
  fd.write_all(text.data(), text.size());
  fd.sync();
  fd.close();
}

// The whole file, or a CheckpointError naming it.
inline std::string read_whole_file(const std::filesystem::path& path) {
  FileDescriptor fd = FileDescriptor::open_read(path);
  std::string data;
  struct stat info {};
  if (::fstat(fd.get(), &info) == 0 && info.st_size > 0)
    data.reserve(static_cast<std::size_t>(info.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ::ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_file_error("reading", path, errno);
    }
    if (got == 0) break;
    data.append(buffer, static_cast<std::size_t>(got));
  }
  return data;
}

// rename(2) over an existing file, atomic on POSIX file systems.
inline void rename_over(const std::filesystem::path& from, const std::filesystem::path& to) {
  check_file_operation(to);
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw CheckpointError("runhooks: renaming " + quoted_path(from) + " to " + quoted_path(to) +
                          ": " + errno_text(errno));
}

// Removes a file; a missing one is not an error.
inline void remove_file(const std::filesystem::path& path) {
  check_file_operation(path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_file_error("removing", path, errno);
}
inline void remove_file_quietly(const std::filesystem::path& path) noexcept {
  if (file_operation_allowed()) (void)::unlink(path.c_str());
}

// 16 lowercase hex digits, different in every call of every process: names of temporary files.
inline std::string unique_token() {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t seed = [] {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }();
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(::getpid()) << 40) ^
                    static_cast<std::uint64_t>(
                        std::chrono::steady_clock::now().time_since_epoch().count()) ^
                    (counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;  // splitmix64's finaliser: every input bit moves every output bit
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(x));
  return text;
}

// Names in `directory` that start with `prefix`, sorted.
inline std::vector<std::string> names_starting_with(const std::filesystem::path& directory,
                                                    std::string_view prefix) {
  std::vector<std::string> names;
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end;
       it.increment(error)) {
    std::string name = it->path().filename().string();
    if (name.size() >= prefix.size() && name.compare(0, prefix.size(), prefix) == 0)
      names.push_back(std::move(name));
  }
  if (error) throw_file_error("listing", directory, error.value());
  std::sort(names.begin(), names.end());
  return names;
}

// The same, empty when the directory cannot be listed: for clean-up on error paths.
inline std::vector<std::string> names_starting_with_quietly(const std::filesystem::path& directory,
                                                            std::string_view prefix) noexcept {
  try {
    return names_starting_with(directory, prefix);
  } catch (...) {
    return {};
  }
}

// Whether `name` is one of the files of checkpoint `prefix`: the prefix itself, or the prefix
// followed by anything that does not start with a digit ("model.ckpt-1.arrays" belongs to
// model.ckpt-1, "model.ckpt-10.arrays" does not).
inline bool belongs_to_prefix(std::string_view name, std::string_view prefix) noexcept {
  if (name.size() < prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  return name.size() == prefix.size() ||
         !(name[prefix.size()] >= '0' && name[prefix.size()] <= '9');
}

// The files of checkpoint `prefix` (a path: directory and file-name prefix), as full paths.
inline std::vector<std::filesystem::path> files_of_prefix(const std::filesystem::path& prefix) {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path directory =
      prefix.has_parent_path() ? prefix.parent_path() : std::filesystem::path(".");
  const std::string stem = prefix.filename().string();
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) return files;
  for (const std::string& name : names_starting_with(directory, stem))
    if (belongs_to_prefix(name, stem)) files.push_back(directory / name);
  return files;
}

}  // namespace runhooks::detail
