// The process's stop ballot: what cast_stop_vote() sets and the stop vote (StopVoteHook,
// MpiStopVoteHook) reads at its next round. Apart from the vote, so that a hook can cast a vote
// without including an engine's rules (TimeLimitHook under Voted).
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>

namespace runhooks {

namespace detail {
// The process's ballot: set from any thread or a signal handler (a lock-free atomic store is
// async-signal-safe), read by the vote at its next round. One per process, whatever the engine.
inline constinit std::atomic<bool> stop_ballot{false};
static_assert(std::atomic<bool>::is_always_lock_free);
}  // namespace detail

// Asks every rank to stop, through this process's stop vote: the ranks stop together after the
// step of its next round. Async-signal-safe; callable from any thread.
inline void cast_stop_vote() noexcept {
  detail::stop_ballot.store(true, std::memory_order_relaxed);
}

}  // namespace runhooks
