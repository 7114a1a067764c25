// poll_global_step: the wait for a global step that other processes advance, by reading it at
// doubling intervals; written once for every engine's shared step (MpiGlobalStep, C10dGlobalStep).
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <stop_token>
#include <thread>

namespace runhooks {

// A global step that can be read: `counter.load()` returns its current value (it may
// communicate, and may throw).
template <class Counter>
concept LoadableGlobalStep = requires(Counter& counter) {
  { counter.load() } -> std::convertible_to<std::int64_t>;
};

// The first sleep of poll_global_step, which then doubles up to the caller's maximum.
inline constexpr std::chrono::duration<double> first_global_step_poll{1e-5};

// Blocks until counter.load() returns at least target, stop is requested, or the deadline
// passes, and returns the value read last (less than target unless reached). Reads at once, then
// after sleeps that start at 10 µs and double up to max_interval (the last one cut to end at the
// deadline): a waiter wakes at most about max_interval plus one load() after the step is reached,
// and a wait of T seconds costs about T / max_interval + log2(max_interval / 10 µs) loads.
// Polls, rather than blocking on a notification, because the engines' shared counters (an MPI
// RMA window, a c10d store key) cannot wake a waiter in another process. An exception from
// load() ends the wait and propagates.
template <LoadableGlobalStep Counter>
std::int64_t poll_global_step(Counter& counter, std::int64_t target, std::stop_token stop,
                              std::chrono::steady_clock::time_point deadline,
                              std::chrono::duration<double> max_interval) {
  std::chrono::duration<double> interval = first_global_step_poll;
  for (;;) {
    const std::int64_t value = counter.load();
    if (value >= target || stop.stop_requested()) return value;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return value;
    auto sleep = std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval);
    if (deadline - now < sleep) sleep = deadline - now;
    std::this_thread::sleep_for(sleep);
    if (interval < max_interval) interval = std::min(interval * 2, max_interval);
  }
}

}  // namespace runhooks
