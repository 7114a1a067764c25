// Clock policies for the time-based hooks: std::chrono::steady_clock by default.
#pragma once

#include <runhooks/detail/config.hpp>

#include <chrono>
#include <concepts>

namespace runhooks {

// A Clock gives seconds as a double from an arbitrary but fixed origin.
//   Minimal complete definition: `double now()`.
//   Optional: `void sleep_for(double seconds, std::stop_token stop)`, returning early once stop
//   is requested; GlobalStepWaiterHook sleeps through it when the clock has one (a test clock
//   such as ManualClock, <runhooks/manual_clock.hpp>), and on the steady clock otherwise.
template <class C>
concept Clock = requires(C& c) {
  { c.now() } -> std::convertible_to<double>;
};

// std::chrono::steady_clock: never jumps, so a rate is never negative.
struct SteadyClock {
  static double now() noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace runhooks
