// SharedGlobalStep: a global step that several threads' backends share and can wait on.
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>

namespace runhooks {

// An atomic counter plus a wait that wakes as soon as a target is reached, when stop is
// requested, or at a deadline. Writers pay one atomic add and one atomic load per increment;
// they take the lock only while some thread is waiting.
class SharedGlobalStep {
 public:
  explicit SharedGlobalStep(std::int64_t start = 0) noexcept : value_(start) {}
  SharedGlobalStep(const SharedGlobalStep&) = delete;
  SharedGlobalStep& operator=(const SharedGlobalStep&) = delete;

  std::int64_t load() const noexcept { return value_.load(std::memory_order_acquire); }

  std::int64_t increment(std::int64_t by = 1) noexcept {
    const std::int64_t now = value_.fetch_add(by, std::memory_order_seq_cst) + by;
    wake();
    return now;
  }

  void store(std::int64_t value) noexcept {
    value_.store(value, std::memory_order_seq_cst);
    wake();
  }

  // Blocks until the value is at least target, stop is requested, or the deadline passes;
  // returns the value then (less than target unless reached).
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    waiters_.fetch_add(1, std::memory_order_seq_cst);
    // seq_cst, not load()'s acquire: this read and the writer's read of waiters_ are the two
    // halves of the handshake in wake(), and only seq_cst loads are ordered after the stores.
    changed_.wait_until(lock, stop, deadline,
                        [&] { return value_.load(std::memory_order_seq_cst) >= target; });
    waiters_.fetch_sub(1, std::memory_order_relaxed);
    return load();
  }

 private:
  void wake() {
    // seq_cst on both sides: either the writer sees the waiter, or the waiter sees the value.
    if (waiters_.load(std::memory_order_seq_cst) != 0) {
      std::lock_guard lock(mutex_);
      changed_.notify_all();
    }
  }

  std::atomic<std::int64_t> value_;
  std::atomic<int> waiters_{0};
  std::mutex mutex_;
  std::condition_variable_any changed_;
};

}  // namespace runhooks
