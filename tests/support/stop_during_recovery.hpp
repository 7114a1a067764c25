// What the tests of "a stop always wins" over recovery share (tests/session/recovery.cpp,
// tests/hooks/signal_stop_hook.cpp): a log another thread can wait on, a retry policy whose
// back-off only a stop can end, a backend factory that keeps failing, and a guard that turns a
// hang into a failure that says what hung.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <runhooks/error.hpp>
#include <runhooks/log.hpp>

#include <support/fakes.hpp>

namespace stops {

// Captures runhooks::log lines while alive; another thread can wait for one.
class WatchedLog {
 public:
  WatchedLog() {
    {
      std::lock_guard lock(mutex());
      lines().clear();
    }
    previous_ = runhooks::set_log_sink(&sink);
  }
  ~WatchedLog() { runhooks::set_log_sink(previous_); }
  WatchedLog(const WatchedLog&) = delete;
  WatchedLog& operator=(const WatchedLog&) = delete;

  // Blocks until a line containing `text` was logged.
  void wait_for(std::string_view text) const {
    std::unique_lock lock(mutex());
    changed().wait(lock, [&] { return count_locked(text) > 0; });
  }
  int count(std::string_view text) const {
    std::lock_guard lock(mutex());
    return count_locked(text);
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::condition_variable& changed() {
    static std::condition_variable c;
    return c;
  }
  static std::vector<std::string>& lines() {
    static std::vector<std::string> kept;
    return kept;
  }
  static int count_locked(std::string_view text) {
    int n = 0;
    for (const std::string& line : lines()) n += line.find(text) != std::string::npos;
    return n;
  }
  static void sink(runhooks::Severity, std::string_view line) {
    {
      std::lock_guard lock(mutex());
      lines().emplace_back(line);
    }
    changed().notify_all();
  }
  runhooks::LogSink previous_;
};

// Retries forever, 11 days apart: a recovery in its back-off ends only if a stop wakes it.
struct ForeverEvery11Days {
  std::optional<double> next_delay(int) const { return 1e6; }
};

// Makes `successes` backends whose first step fails with UnavailableError, then fails every
// creation with UnavailableError: a recovery that never succeeds.
struct FailingFactory {
  int* calls;
  int successes = 0;
  fakes::FakeBackend operator()() {
    if (++*calls > successes) throw runhooks::UnavailableError("the backend's host is down");
    fakes::FakeBackend backend;
    backend.throw_at(1, runhooks::UnavailableError("the step lost its backend"));
    return backend;
  }
};

// Ends the test program, saying what hung, unless released within 20 s. Not a measurement: a
// stop is expected to end the wait at once, and without it the back-off lasts 11 days (or the
// retries never end); 20 s stays under Meson's 30 s timeout so that the failure names the case.
class HangGuard {
 public:
  explicit HangGuard(std::string what)
      : what_(std::move(what)), thread_([this] {
          std::unique_lock lock(mutex_);
          if (!released_cv_.wait_for(lock, std::chrono::seconds(20), [&] { return released_; })) {
            std::fprintf(stderr, "HANG (20 s): %s\n", what_.c_str());
            std::_Exit(1);
          }
        }) {}
  ~HangGuard() { release(); }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;

  void release() {
    {
      std::lock_guard lock(mutex_);
      released_ = true;
    }
    released_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string what_;
  std::mutex mutex_;
  std::condition_variable released_cv_;
  bool released_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace stops
