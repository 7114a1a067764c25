// A child process for the fault tests (checkpoint_faults, recovery_signal): spawned with its
// stdout in a pipe, read line by line, signalled, waited for; SIGKILLed and reaped if the test
// leaves early.
#pragma once

#include <doctest/doctest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace support {

class Child {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Child(std::vector<std::string> args) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int error = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    out_ = fds[0];
    REQUIRE_MESSAGE(error == 0, "posix_spawn " << args[0] << ": " << std::strerror(error));
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (out_ >= 0) ::close(out_);
  }

  // Reads what the child writes for up to `ms` milliseconds (until its stdout closes).
  void read_for(double ms) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::microseconds(static_cast<long>(ms * 1000));
    while (out_ >= 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() < 0) return;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) > 0) drain_once();
      else if (Clock::now() >= deadline) return;
    }
  }
  // Reads until the child's stdout closes.
  void read_all() {
    while (out_ >= 0) drain_once();
  }
  // Reads until a line equals `line`, the pipe closes, or `limit` passes; whether it came.
  bool read_until(const std::string& line, std::chrono::duration<double> limit) {
    const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
    while (!said(line) && out_ >= 0 && Clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) drain_once();
    }
    return said(line);
  }

  void kill(int signal) { ::kill(pid_, signal); }
  pid_t pid() const { return pid_; }

  // Waits for the child to exit; its waitpid() status.
  int wait() {
    if (pid_ > 0) {
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      status_ = status;
    }
    return status_;
  }
  // Waits up to `limit`; the waitpid() status, or -1 if it still runs (the destructor kills it).
  int wait_for(std::chrono::duration<double> limit) {
    const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
    for (;;) {
      int status = 0;
      const pid_t got = ::waitpid(pid_, &status, WNOHANG);
      if (got == pid_) {
        pid_ = -1;
        status_ = status;
        read_all();
        return status;
      }
      if (Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  const std::string& output() const { return output_; }
  std::vector<std::string> lines() const {
    std::vector<std::string> lines;
    std::istringstream in(output_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  bool said(const std::string& line) const {
    for (const std::string& l : lines())
      if (l == line) return true;
    return false;
  }
  int count_containing(const std::string& text) const {
    int n = 0;
    for (const std::string& l : lines()) n += l.find(text) != std::string::npos;
    return n;
  }

 private:
  void drain_once() {
    char buffer[4096];
    const ::ssize_t got = ::read(out_, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) return;
    if (got <= 0) {
      ::close(out_);
      out_ = -1;
      return;
    }
    output_.append(buffer, static_cast<std::size_t>(got));
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = 0;
  std::string output_;
};

}  // namespace support
