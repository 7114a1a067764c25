// Sleeps for the session's waits: a plain one, and recovery's back-off, which every stop request
// of the process wakes at once (a signal handler's included). Without <thread>: on POSIX they
// are nanosleep() and, on Linux, a futex, which <time.h> and <sys/syscall.h> declare at a
// fraction of <thread>'s compile time.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(_WIN32)
#include <chrono>
#include <thread>
#else
#include <cerrno>
#include <climits>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace runhooks::detail {

// Sleeps for `secs` seconds (0 <= secs <= max_duration_secs, checked by the caller), resuming
// after signals.
inline void sleep_secs(double secs) {
  if (!(secs > 0.0)) return;
#if defined(_WIN32)
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
#else
  timespec left{};
  left.tv_sec = static_cast<time_t>(secs);
  left.tv_nsec = static_cast<long>((secs - static_cast<double>(left.tv_sec)) * 1e9);
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
#endif
}

// Process-wide, as signals are: bumped by every stop request that may have to end a wait
// (SignalStopHook's handler, a session's request_stop(), a Coordinator's request_stop()). A
// waiter re-reads its own stop condition whenever it changes, so one word serves every session:
// a wake meant for another session costs a spurious look at a few flags.
inline constinit std::atomic<std::uint32_t> stop_epoch{0};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

// Wakes every wait_unless_stopped() of the process. Async-signal-safe: a lock-free atomic
// increment and, on Linux, one futex system call.
inline void wake_stop_waiters() noexcept {
  stop_epoch.fetch_add(1, std::memory_order_seq_cst);
#if defined(__linux__)
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&stop_epoch), FUTEX_WAKE_PRIVATE, INT_MAX,
            nullptr, nullptr, 0);
#endif
}

// Sleeps for `secs` seconds (checked by the caller, as for sleep_secs) unless stopped() is or
// becomes true; returns whether it did. stopped() is read first, then after each
// wake_stop_waiters(): a stop whose flag is set before its wake_stop_waiters() call is never
// missed (the wait is on the epoch the flag was read under). On Linux the wait is a futex, woken
// at once; elsewhere it sleeps in slices of 10 ms between looks.
template <class Stopped>
bool wait_unless_stopped(double secs, Stopped&& stopped) {
#if defined(_WIN32)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
  for (;;) {
    if (stopped()) return true;
    const std::chrono::duration<double> left = deadline - std::chrono::steady_clock::now();
    if (left.count() <= 0.0) return false;
    std::this_thread::sleep_for(left.count() < 0.01 ? left : std::chrono::duration<double>(0.01));
  }
#else
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const double deadline = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9 + secs;
  for (;;) {
    const std::uint32_t epoch = stop_epoch.load(std::memory_order_seq_cst);
    if (stopped()) return true;
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    double left = deadline - (static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9);
    if (left <= 0.0) return false;
#if defined(__linux__)
    timespec timeout{};
    timeout.tv_sec = static_cast<time_t>(left);
    timeout.tv_nsec = static_cast<long>((left - static_cast<double>(timeout.tv_sec)) * 1e9);
    // Returns at a wake, at once if the epoch moved since it was read, at the timeout, or on a
    // signal (EINTR): every case looks again.
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&stop_epoch), FUTEX_WAIT_PRIVATE, epoch,
              &timeout, nullptr, 0);
#else
    (void)epoch;
    if (left > 0.01) left = 0.01;
    timespec slice{};
    slice.tv_nsec = static_cast<long>(left * 1e9);
    nanosleep(&slice, nullptr);
#endif
  }
#endif
}

}  // namespace runhooks::detail
