// C10dGlobalStep: a global step shared by every rank of a torchrun job, in the job's c10d store,
// for asynchronous workers as in TensorFlow's parameter-server training; MpiGlobalStep's
// counterpart on the c10d engine.
#pragma once

#include <runhooks/detail/config.hpp>

// First, right after config.hpp: the header check of tests/torch/distributed/meson.build
// compiles this header alone, and so checks that c10d_environment.hpp compiles alone too.
#include <runhooks/torch/distributed/c10d_environment.hpp>

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include <runhooks/detail/checked.hpp>
#include <runhooks/distributed/poll_global_step.hpp>
#include <runhooks/torch/distributed/c10d_collective.hpp>
#include <runhooks/torch/distributed/torchrun_environment.hpp>

namespace runhooks {

struct C10dGlobalStepOptions {
  // While wait_for_global_step() waits, it reads the step with a poll that starts at 10 µs and
  // doubles up to this interval, so a waiter wakes at most about this long (plus one read) after
  // the step is reached. Each poll is one request to the job's store, which torchrun's agent (or
  // rank 0) serves for every rank: hence 1 ms, five times MpiGlobalStepOptions' 200 µs (a read of
  // shared memory there). Raise it for jobs of many ranks that wait long. Greater than 0, at most
  // 1e9 s.
  double max_poll_interval_secs = 0.001;

  const C10dGlobalStepOptions& validate() const {
    detail::checked_secs("C10dGlobalStepOptions::max_poll_interval_secs", max_poll_interval_secs,
                         0.0, /*min_exclusive=*/true);
    return *this;
  }
};

namespace detail {

// C10dGlobalSteps this process has made: every rank's n-th one uses the key "global_step/n".
inline constinit std::int64_t c10d_global_steps_made = 0;

// A counter's value as the store holds it: the decimal text that TCPStore's add() writes
// (std::to_string), parsed strictly (an optional '-', digits, nothing else, in range).
inline std::optional<std::int64_t> parse_store_counter(std::string_view text) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || at != end) return std::nullopt;
  return value;
}

}  // namespace detail

// One 64-bit counter, a key of the job's c10d store (C10dEnvironment::store(): torchrun's
// TCPStore, the key under this job's and attempt's prefix), reached by these requests:
//   increment(by)  add(key, by): the store adds atomically and returns the new value;
//   load()         add(key, 0), which reads the value (the same request, hence as atomic);
//   store(value)   compareSet(key, expected, value) from the value this rank saw last, repeated
//                  with the value the store returns until it returns `value` (see store()).
// TCPStore serves the requests of every rank one at a time (one thread, in torchrun's agent or,
// with TORCHELASTIC_USE_AGENT_STORE=False, rank 0), so each request is atomic with respect to
// every other rank's.
//
// Per step a worker pays one request, its increment, which also returns the new value: cached()
// (what a backend's global_step() returns) is then the step as of this rank's last access,
// TensorFlow's "stale read" of the global step, and costs nothing. load() reads the current
// value. A request is a TCP round trip to the store's server, tens of µs on one machine: far
// dearer than MpiGlobalStep's shared memory, so this suits steps of milliseconds (the
// asynchronous workers of a real model), not the empty step.
//
// Construction is collective over the job (rank 0 sets the start value, then a barrier of the
// process group, so that nobody reads before it is set): every rank makes its C10dGlobalSteps in
// the same order, as its other collectives, and the n-th of each rank shares one key. Destruction
// is not collective: the key (a few bytes) stays in the store until the job ends, since a rank
// that deleted it would reset it to 0 for a rank still reading. A new attempt after a torchrun
// restart has keys of its own (C10dEnvironment's prefix): it starts from its own start value.
//
// Errors: a request that fails (the store's server gone, no answer within the store's timeout,
// C10dOptions::timeout_secs for the environment's store) is a C10dError naming this rank, the
// operation, the key and c10d's message. Not thread-safe: use it from the thread that runs the
// session, as MpiGlobalStep.
class C10dGlobalStep {
 public:
  // On the environment's store and process group.
  explicit C10dGlobalStep(const C10dEnvironment& env, std::int64_t start = 0,
                          C10dGlobalStepOptions options = {})
      : C10dGlobalStep(env.store(), env.collective(), start, options) {}

  // On any c10d store that every rank of `collective` reaches (its rank 0 sets the start value,
  // its barrier waits for it). The store must implement compareSet (TCPStore, FileStore,
  // PrefixStore over them).
  C10dGlobalStep(c10::intrusive_ptr<c10d::Store> store, C10dCollective collective,
                 std::int64_t start = 0, C10dGlobalStepOptions options = {})
      : options_(options.validate()), store_(std::move(store)), who_(collective.describe()),
        key_("global_step/" + std::to_string(detail::c10d_global_steps_made++)) {
    if (collective.rank() == 0)
      request("set of the start value", [&] { store_->set(key_, std::to_string(start)); });
    collective.barrier();
    cached_ = start;
    store_operations_ = 0;
  }
  C10dGlobalStep(const C10dGlobalStep&) = delete;
  C10dGlobalStep& operator=(const C10dGlobalStep&) = delete;

  // Adds `by` and returns the new value (one request).
  std::int64_t increment(std::int64_t by = 1) {
    cached_ = request("add", [&] { return store_->add(key_, by); });
    return cached_;
  }

  // The current value (one request).
  std::int64_t load() {
    cached_ = request("read (add of 0)", [&] { return store_->add(key_, 0); });
    return cached_;
  }

  // Sets the value, e.g. to a restored step; other ranks see it on their next access.
  //
  // Linearizable with the other ranks' increments: the store holds exactly `value` at one
  // instant, and every increment is wholly before it (lost, as with any store) or after it
  // (counted from `value`). A compare-and-set does it: compareSet(key, expected, value) writes
  // value only if the key still holds `expected`, and answers what the key holds after the
  // request. Answered `value`, the set took effect (or the key held `value` already, which is
  // the same linearization: the store after the increment that made it); answered anything else,
  // an increment came between, and the set is retried with that answer as `expected`. Each retry
  // follows another rank's completed increment, so the loop ends unless the others increment
  // forever faster than one round trip. It costs one request when cached() is current, one more
  // per increment that races with it. (An add of `value - load()` would cost two requests and
  // count an increment that lands between them on top of `value`.)
  void store(std::int64_t value) {
    const std::string wanted = std::to_string(value);
    std::string expected = std::to_string(cached_);
    for (;;) {
      std::string held = request("compare-and-set",
                                 [&] { return store_->compareSet(key_, expected, wanted); });
      if (held == wanted) break;
      // A key that is missing answers `expected` (TCPStore's compareSet): retrying would spin.
      if (held == expected)
        throw C10dError("runhooks: " + who_ + ": the global step's key '" + key_ +
                        "' is missing from the job's store (deleted by someone else?)");
      if (!detail::parse_store_counter(held))
        throw C10dError("runhooks: " + who_ + ": the global step's key '" + key_ +
                        "' holds '" + held + "', not an integer (written by someone else?)");
      expected = std::move(held);
    }
    cached_ = value;
  }

  // The value this rank saw last (its last increment, load, store or wait), with no
  // communication: at most one step of this rank old, plus whatever the other ranks added since.
  std::int64_t cached() const noexcept { return cached_; }

  // Blocks until the value is at least target, stop is requested, or the deadline passes, and
  // returns the value read last (less than target unless reached). Polls with load(), starting
  // at 10 µs and doubling up to max_poll_interval_secs (poll_global_step). Makes a backend that
  // forwards to it a runhooks::WaitableGlobalStep, so GlobalStepWaiterHook wakes within about one
  // poll interval.
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    std::chrono::steady_clock::time_point deadline) {
    return poll_global_step(*this, target, stop, deadline,
                            std::chrono::duration<double>(options_.max_poll_interval_secs));
  }

  // Requests to the store this rank has issued since construction: one per increment and load,
  // one per compare-and-set of a store.
  std::int64_t store_operations() const noexcept { return store_operations_; }

  // The counter's key in the store (under the store's prefix).
  const std::string& key() const noexcept { return key_; }

 private:
  // Runs one request to the store, counted; its failure is a C10dError naming this rank.
  template <class Operation>
  std::invoke_result_t<Operation> request(const char* operation, Operation&& operation_body) {
    ++store_operations_;
    try {
      return std::forward<Operation>(operation_body)();
    } catch (const std::exception& e) {
      throw C10dError("runhooks: " + who_ + ": the global step's " + operation + " (key '" +
                      key_ + "') in the job's store failed: " + detail::c10d_message(e));
    }
  }

  C10dGlobalStepOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string who_;
  std::string key_;
  std::int64_t cached_ = 0;
  std::int64_t store_operations_ = 0;
};

}  // namespace runhooks
