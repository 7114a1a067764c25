// The session's stop state: the flags that should_stop() reads on every step, who may write
// each, and how a stop from another thread reaches a session that is creating its backend.
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <exception>

#include <runhooks/detail/coordinator_slot.hpp>

namespace runhooks::detail {

// should_stop() reads only `attention` on the per-step path, a plain flag set when a stop was
// asked for (by a hook, the caller, close(), a recovery without a backend), while an
// error waits to be raised, and for as long as someone may stop the coordinator from another
// thread (a hook whose after_create_session takes `Coordinator&`, or a caller of coordinator()).
// Only then does it also load `raised`, an atomic flag that the coordinator raises when it is
// stopped and that every local stop raises too: a session nobody can stop from another thread
// has no atomic load on its per-step path, and one that can has the one a hand-written loop
// would have.
struct StopState {
  bool attention = false;  // stop || polls_coordinator
  // Set by a hook's stop request, by the caller's, on close, while recovery has no backend, and
  // while an error waits to be raised.
  bool stop = false;
  bool caller_stop = false;  // survives recovery, which clears only the hooks' requests
  bool polls_coordinator = false;
  bool closed = false;
  int uncaught;  // std::uncaught_exceptions() at construction, to tell a clean scope exit
  double grace_secs = 120.0;          // TensorFlow's stop_grace_period_secs
  std::exception_ptr pending_error;   // a coordinator thread's error that run() has not raised
  std::exception_ptr raised_error;    // the one run() raised, so close() does not raise it twice
  std::atomic<bool> raised{false};    // stop, or the coordinator was stopped
  CoordinatorSlot coord{&raised};     // made on demand; raises `raised` when stopped
  // While the loop's thread creates or re-creates the backend, it is blocked inside the session,
  // and a request_stop() comes from another thread: that one must not write the plain flags
  // above. 0: not recovering; 1: recovering; 2: recovering, and request_stop() was called.
  std::atomic<int> recovering{0};

  // Out of line: the compiler then does not carry `attention`'s first value into the loop in a
  // register, and the per-step test stays one compare of memory (clang).
  [[gnu::noinline]] StopState() noexcept : uncaught(std::uncaught_exceptions()) {}
  StopState(const StopState&) = delete;
  StopState& operator=(const StopState&) = delete;

  void set_stop() noexcept {
    stop = attention = true;
    raised.store(true, std::memory_order_relaxed);
  }
  // After a re-creation that succeeded: only the caller's stop survives. The new generation's
  // threads may have stopped the coordinator already: lower the flag first, then look, with the
  // coordinator's own two stores seq_cst too, so that their raise is never lost.
  void clear_stop() noexcept {
    stop = caller_stop;
    attention = stop || polls_coordinator;
    raised.store(stop, std::memory_order_seq_cst);
    if (coord.exists() && coord.stop_requested()) raised.store(true, std::memory_order_relaxed);
  }
  void poll_coordinator() noexcept { polls_coordinator = attention = true; }
};

// Marks the loop's thread as creating or re-creating the backend (state.recovering), so that a
// request_stop() from another thread only flips the atomic. The outermost scope, on leaving,
// turns such a request into the caller's stop, on the loop's thread.
class RecoveringScope {
 public:
  explicit RecoveringScope(StopState& state) noexcept : state_(state) {
    int expected = 0;
    outermost_ = state.recovering.compare_exchange_strong(expected, 1, std::memory_order_seq_cst);
  }
  RecoveringScope(const RecoveringScope&) = delete;
  RecoveringScope& operator=(const RecoveringScope&) = delete;
  ~RecoveringScope() {
    if (outermost_ && state_.recovering.exchange(0, std::memory_order_seq_cst) == 2) {
      state_.caller_stop = true;
      state_.set_stop();
    }
  }

 private:
  StopState& state_;
  bool outermost_;
};

}  // namespace runhooks::detail
