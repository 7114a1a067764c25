// ManualClock: a clock that moves only when told to, for tests of the time-based hooks.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <functional>
#include <memory>
#include <stop_token>
#include <utility>

namespace runhooks {

// Copies share one time, so a test keeps a copy and advances the clock that a hook inside a
// session reads. sleep_for() advances the time by the amount slept and then calls the optional
// on_sleep callback, which lets a test change the world "while" a hook sleeps, as TensorFlow's
// tests do with a mocked time.sleep. The callback must refer to the clock, not hold a copy: a
// copy shares the state that stores the callback.
class ManualClock {
 public:
  // Not explicit when defaulted: the hooks take their clock as `C clock = {}`.
  ManualClock() : ManualClock(0.0) {}
  explicit ManualClock(double start) : state_(std::make_shared<State>(State{start, {}, 0})) {}

  double now() const noexcept { return state_->now; }
  void advance(double seconds) noexcept { state_->now += seconds; }
  void set(double seconds) noexcept { state_->now = seconds; }

  void sleep_for(double seconds, std::stop_token = {}) {
    ++state_->sleeps;
    state_->now += seconds;
    if (state_->on_sleep) state_->on_sleep();
  }
  int sleeps() const noexcept { return state_->sleeps; }
  template <std::invocable F>
  void on_sleep(F f) {
    state_->on_sleep = std::move(f);
  }

 private:
  struct State {
    double now;
    std::function<void()> on_sleep;
    int sleeps;
  };
  std::shared_ptr<State> state_;
};

}  // namespace runhooks
