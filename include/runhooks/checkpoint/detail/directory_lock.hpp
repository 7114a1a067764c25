// One writer per checkpoint directory: a POSIX record lock (fcntl F_SETLK, the whole file) on
// <dir>/.runhooks-lock, held while a CheckpointManager is open and released by the kernel when the
// process that took it closes it or dies, however it dies. A second writer (another process, or
// another manager in this one) fails at once, naming the directory and the holder's pid. Readers
// (restores, latest_checkpoint, TensorFlow) take no lock.
//
// Why a POSIX lock (issue 29): the lock is the process's own, and fork() does not carry it. An
// flock (or an F_OFD_SETLK lock) belongs to the open file description, which a child made with
// fork() and no exec shares: the child kept the directory locked after its parent closed it, and
// a killed writer's orphaned children kept it from the restart. With a POSIX lock the parent
// closes and reopens freely while its children live, a child's copy of a manager is not the
// writer (it fails like any second writer, naming its parent), and the kernel names the holder
// (F_GETLK), so runhooks never writes the file: nothing it did not create is ever truncated.
// Two properties of POSIX locks are handled here: they do not exclude within one process, so this
// process's locks are kept in a table that a second manager here is checked against; and the
// kernel drops them when the process closes any descriptor of the file, so each lock file is
// opened once per lock held, a second descriptor kept open until that lock is released.
// The lock file is untrusted like every file of the directory (STYLE.md habit 14): it is opened
// with O_NOFOLLOW, so a symbolic link planted there is an error naming it, never followed, and
// anything but a regular file is refused.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>

namespace runhooks::detail {

class DirectoryLock {
 public:
  DirectoryLock() = default;
  DirectoryLock(DirectoryLock&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), owner_(other.owner_), file_(other.file_) {}
  DirectoryLock& operator=(DirectoryLock&& other) noexcept {
    if (this != &other) {
      release();
      fd_ = std::exchange(other.fd_, -1);
      owner_ = other.owner_;
      file_ = other.file_;
    }
    return *this;
  }
  ~DirectoryLock() { release(); }

  // Takes the lock of `directory`, or throws CheckpointError naming the holder, or the lock file
  // and why it cannot be one. The lock file is never removed: removing it would let two processes
  // lock two different files of one name.
  static DirectoryLock acquire(const std::filesystem::path& directory) {
    const std::filesystem::path path = directory / checkpoint_lock_filename;
    check_file_operation(path);
    Held& table = Held::instance();
    std::lock_guard guard(table.mutex);
    int fd;
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                  0644);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      const int error = errno;
      struct stat info {};
      if (::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode))
        throw CheckpointError("runhooks: the lock file " + quoted_path(path) +
                              " is a symbolic link: runhooks never follows a link in its "
                              "checkpoint directory; remove it.");
      if (error == EISDIR) not_a_regular_file(path);
      throw_file_error("cannot create the lock file", path, error);
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
      ::close(fd);
      not_a_regular_file(path);
    }
    const FileId id{info.st_dev, info.st_ino};
    const ::pid_t self = ::getpid();
    const auto found = table.locks.find(id);
    if (found != table.locks.end() && found->second.owner == self) {
      // Closing this descriptor would drop the other manager's lock: keep it until that one goes.
      try {
        found->second.parked.push_back(fd);
      } catch (...) {  // out of memory: leak the descriptor rather than drop that lock
      }
      throw_held(directory, path,
                 "this process, pid " + std::to_string(self) + ", through another CheckpointManager,");
    }
    struct flock want {};
    want.l_type = F_WRLCK;
    want.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file, however long it grows
    for (int attempt = 0;; ++attempt) {
      if (::fcntl(fd, F_SETLK, &want) == 0) break;
      const int error = errno;
      if (error == EINTR) continue;
      if (error != EACCES && error != EAGAIN) {
        ::close(fd);  // no lock of this process is on the file: closing it drops nothing
        throw_file_error("cannot lock", path, error);
      }
      struct flock holder = want;
      const bool known = ::fcntl(fd, F_GETLK, &holder) == 0;
      if (known && holder.l_type == F_UNLCK && attempt < 3) continue;  // released meanwhile
      ::close(fd);
      throw_held(directory, path, who(known && holder.l_type != F_UNLCK ? holder.l_pid : 0));
    }
    try {
      table.locks[id] = Entry{self, {}};  // replaces an entry a fork() copied from a parent
    } catch (...) {
      ::close(fd);
      throw;
    }
    DirectoryLock lock;
    lock.fd_ = fd;
    lock.owner_ = self;
    lock.file_ = id;
    return lock;
  }

  // Whether this process holds the lock: not a fork()ed child through its copy of the holder.
  bool held() const noexcept { return fd_ >= 0 && owner_ == ::getpid(); }

 private:
  using FileId = std::pair<::dev_t, ::ino_t>;
  struct Entry {
    ::pid_t owner;
    std::vector<int> parked;  // other descriptors of the file, closed with the lock
  };
  // The lock files this process holds. An entry whose owner is not this process was copied by a
  // fork(): the child holds none of its parent's locks.
  struct Held {
    static Held& instance() {
      static Held held;
      return held;
    }
    std::mutex mutex;
    std::map<FileId, Entry> locks;
  };

  [[noreturn]] static void not_a_regular_file(const std::filesystem::path& path) {
    throw CheckpointError("runhooks: the lock file " + quoted_path(path) +
                          " is not a regular file: runhooks creates it as one; remove it.");
  }

  [[noreturn]] static void throw_held(const std::filesystem::path& directory,
                                      const std::filesystem::path& path, const std::string& holder) {
    throw CheckpointError("runhooks: the checkpoint directory " + quoted_path(directory) +
                          " already has a writer (" + holder + " holds its lock " +
                          quoted_path(path) +
                          "). A checkpoint directory has one writer at a time: give each "
                          "CheckpointManager or CheckpointSaverHook its own checkpoint_dir, or "
                          "save from one process only (the chief).");
  }

  static std::string who(::pid_t pid) {
    if (pid <= 0) return "another process";  // in another PID namespace
    if (pid == ::getppid())
      return "process " + std::to_string(pid) +
             ", the parent this process was fork()ed from (a child does not hold its parent's "
             "lock),";
    return "process " + std::to_string(pid);
  }

  // Closes the descriptor, which releases the lock when this process holds it. A fork()ed
  // child's copy releases nothing of its parent's, and must not drop a lock the child took since
  // on the same file: then its descriptor joins that lock's.
  void release() noexcept {
    const int fd = std::exchange(fd_, -1);
    if (fd < 0) return;
    const ::pid_t self = ::getpid();
    std::vector<int> parked;
    try {
      Held& table = Held::instance();
      std::lock_guard guard(table.mutex);
      const auto found = table.locks.find(file_);
      if (found != table.locks.end() && found->second.owner == self) {
        if (owner_ != self) {
          found->second.parked.push_back(fd);
          return;
        }
        parked = std::move(found->second.parked);
        table.locks.erase(found);
      }
    } catch (...) {  // the table's mutex failed: close all the same
    }
    ::close(fd);
    for (const int other : parked) ::close(other);
  }

  int fd_ = -1;
  ::pid_t owner_ = 0;
  FileId file_{};
};

}  // namespace runhooks::detail
