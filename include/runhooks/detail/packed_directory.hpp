// packed_directory: the files of one saved state as one byte string, and back, so that the chief
// can send its state to the other ranks through any engine's broadcast (no shared file system).
#pragma once

#include <runhooks/detail/config.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

namespace runhooks::detail {

// The regular files of `directory`, by name, as one byte string: for each file, its name's
// length, the name, the content's length, the content (lengths as 8-byte integers in the
// machine's byte order: every rank runs the same program on the same kind of machine). Throws
// ErrorType if a file cannot be read.
template <class ErrorType>
std::string pack_directory(const std::filesystem::path& directory) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::string packed;
  const auto put_size = [&packed](std::uint64_t n) {
    packed.append(reinterpret_cast<const char*>(&n), sizeof n);
  };
  for (const auto& file : files) {
    const std::string name = file.filename().string();
    std::ifstream in(file, std::ios::binary);
    const std::string content((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof())
      throw ErrorType("runhooks: reading " + file.string() + " to send it failed");
    put_size(name.size());
    packed += name;
    put_size(content.size());
    packed += content;
  }
  return packed;
}

// Writes the files of a packed string into `directory`. The string came over the network: a
// truncated string or a name that is not a plain file name ('/', ".", "..") is an ErrorType,
// and nothing is written outside `directory`.
template <class ErrorType>
void unpack_directory(const std::string& packed, const std::filesystem::path& directory) {
  std::size_t at = 0;
  const auto get_size = [&]() {
    std::uint64_t n = 0;
    if (packed.size() - at < sizeof n) throw ErrorType("runhooks: the chief's state is truncated");
    std::copy_n(packed.data() + at, sizeof n, reinterpret_cast<char*>(&n));
    at += sizeof n;
    if (packed.size() - at < n) throw ErrorType("runhooks: the chief's state is truncated");
    return static_cast<std::size_t>(n);
  };
  while (at < packed.size()) {
    const std::size_t name_size = get_size();
    const std::string name = packed.substr(at, name_size);
    at += name_size;
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw ErrorType("runhooks: the chief's state names a bad file '" + name + "'");
    const std::size_t content_size = get_size();
    std::ofstream out(directory / name, std::ios::binary);
    out.write(packed.data() + at, static_cast<std::streamsize>(content_size));
    at += content_size;
    if (!out.flush())
      throw ErrorType("runhooks: writing the chief's state to " + (directory / name).string() +
                      " failed");
  }
}

// A private directory under the system's temporary directory, removed with the object. Throws
// ErrorType if none can be created.
template <class ErrorType>
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    static std::atomic<int> counter{0};
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    for (int attempt = 0;; ++attempt) {
      path_ = base / ("runhooks-state-" + std::to_string(::getpid()) + "-" +
                      std::to_string(counter.fetch_add(1)));
      std::error_code error;
      if (std::filesystem::create_directory(path_, error)) return;
      if (attempt > 100 || error)
        throw ErrorType("runhooks: cannot create a temporary directory " + path_.string() +
                        (error ? ": " + error.message() : std::string()));
    }
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace runhooks::detail
