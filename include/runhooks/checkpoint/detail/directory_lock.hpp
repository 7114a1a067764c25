// One writer per checkpoint directory: an advisory flock(2) on <dir>/.runhooks-lock, held while a
// CheckpointManager lives and released by the kernel when its holder dies, however it dies. A
// second writer (another process, or another manager in this one) fails at once, naming the
// directory and the holder's pid. Readers (restores, latest_checkpoint, TensorFlow) take no lock.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>

namespace runhooks::detail {

class DirectoryLock {
 public:
  DirectoryLock() = default;

  // Takes the lock of `directory`, or throws CheckpointError naming the holder. The lock file is
  // never removed: removing it would let two processes lock two different files of one name.
  static DirectoryLock acquire(const std::filesystem::path& directory) {
    const std::filesystem::path path = directory / checkpoint_lock_filename;
    check_file_operation(path);
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) throw_file_error("cannot create the lock file", path, errno);
    FileDescriptor file(fd, path);
    int locked;
    do {
      locked = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (locked != 0 && errno == EINTR);
    if (locked != 0) {
      const int error = errno;
      if (error != EWOULDBLOCK) throw_file_error("cannot lock", path, error);
      throw CheckpointError("runhooks: the checkpoint directory " + quoted_path(directory) +
                            " already has a writer (" + holder(fd) +
                            " holds its lock " + quoted_path(path) +
                            "). A checkpoint directory has one writer at a time: give each "
                            "CheckpointManager or CheckpointSaverHook its own checkpoint_dir, or "
                            "save from one process only (the chief).");
    }
    // Who holds it, for the message above; the lock, not this text, is what excludes.
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, pid.data(), pid.size(), 0);
    DirectoryLock lock;
    lock.file_ = std::move(file);
    return lock;
  }

  bool held() const noexcept { return file_.get() >= 0; }

 private:
  static std::string holder(int fd) {
    char text[32] = {};
    const ::ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
    long pid = 0;
    if (got > 0) {
      const auto [end, error] = std::from_chars(text, text + got, pid);
      if (error == std::errc{} && pid > 0 && (end == text + got || *end == '\n')) {
        if (pid == static_cast<long>(::getpid()))
          return "this process, pid " + std::to_string(pid) + ", through another CheckpointManager";
        return "process " + std::to_string(pid);
      }
    }
    return "another process";
  }

  FileDescriptor file_;  // closing it releases the lock
};

}  // namespace runhooks::detail
