// GlobalStepWaiterHook: holds back a worker's first step until the global step reaches a value.
#pragma once

#include <runhooks/detail/config.hpp>

#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

// A backend whose global step can be waited on, e.g. one that forwards to a SharedGlobalStep.
template <class B>
concept WaitableGlobalStep =
    requires(B& b, std::int64_t target, std::stop_token stop,
             std::chrono::steady_clock::time_point deadline) {
      { b.wait_for_global_step(target, stop, deadline) } -> std::convertible_to<std::int64_t>;
    };

struct GlobalStepWaiterOptions {
  // How often to read a global step that cannot be waited on (TensorFlow: 0.5 s), and how often
  // to log progress while waiting on one that can. Greater than 0, at most 1e9 s.
  double poll_interval_secs = 0.5;
  // Give up with DeadlineExceededError after this long; by default wait as long as it takes.
  // At least 0, at most 1e9 s.
  std::optional<double> timeout_secs{};

  // Throws std::invalid_argument naming the option and its value for a zero, negative, NaN,
  // infinite or huge value; a compile error when the options are constexpr.
  constexpr const GlobalStepWaiterOptions& validate() const {
    detail::checked_secs("GlobalStepWaiterOptions::poll_interval_secs", poll_interval_secs, 0.0,
                         /*min_exclusive=*/true);
    if (timeout_secs) detail::checked_secs("GlobalStepWaiterOptions::timeout_secs", *timeout_secs);
    return *this;
  }
};

namespace detail {
// Sleeps on the clock when it can (a test clock), else on the steady clock; returns early once
// stop is requested.
template <class C>
void sleep_on(C& clock, double secs, const std::stop_token& stop) {
  if constexpr (requires { clock.sleep_for(secs, stop); }) {
    clock.sleep_for(secs, stop);
  } else {
    std::mutex mutex;
    std::condition_variable_any never_notified;
    std::unique_lock lock(mutex);
    never_notified.wait_for(lock, stop, std::chrono::duration<double>(secs), [] { return false; });
  }
}
}  // namespace detail

// TensorFlow's GlobalStepWaiterHook: before the first run only, wait until the global step is at
// least wait_until_step (no wait for a value of zero or less), logging
// "Waiting for global step %d before starting training." and progress after more than 1000
// steps. Beyond TensorFlow: a WaitableGlobalStep backend wakes the waiter as soon as the step
// is reached; the wait ends when the coordinator is stopped (or a hook earlier in the list asked
// to stop in this run), by throwing StopIteration, which ends a run_loop cleanly; and an
// optional timeout ends it with DeadlineExceededError. After the first run the per-step cost is
// one test of a flag.
template <Clock C = SteadyClock>
class GlobalStepWaiterHook {
 public:
  explicit GlobalStepWaiterHook(std::int64_t wait_until_step, GlobalStepWaiterOptions options = {},
                                C clock = {})
      : wait_until_step_(wait_until_step), options_(options.validate()), clock_(std::move(clock)) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names GlobalStepWaiterOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                GlobalStepWaiterOptions, &GlobalStepWaiterOptions::poll_interval_secs,
                &GlobalStepWaiterOptions::timeout_secs>>
  explicit GlobalStepWaiterHook(...) = delete;  // Misspelt field? Write GlobalStepWaiterOptions{...} to see which

  void begin() noexcept { started_ = false; }

  template <class Backend>
  void after_create_session(Backend&, const Coordinator& coord) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::GlobalStepWaiterHook needs a backend with `std::int64_t "
                  "global_step() const`; the backend type is named in this instantiation.");
    stop_ = coord.stop_token();
  }

  template <class Ctx>
  void before_run(Ctx& run_context) {
    if (started_) [[likely]]
      return;
    // Without global_step() after_create_session has reported the mistake; say it once.
    // The backend and this run's stop request, not the context: a context that escapes into an
    // out-of-line call would have to be kept in memory on every step.
    if constexpr (HasGlobalStep<std::remove_cvref_t<decltype(run_context.session())>>)
      wait(run_context.session(), run_context.stop_requested());
  }

  bool started() const noexcept { return started_; }
  std::int64_t wait_until_step() const noexcept { return wait_until_step_; }
  const GlobalStepWaiterOptions& options() const noexcept { return options_; }

 private:
  template <class Backend>
  [[gnu::noinline]] void wait(Backend& backend, bool stop_requested_in_this_run) {
    if (wait_until_step_ <= 0) {
      started_ = true;
      return;
    }
    log(Severity::info, "Waiting for global step " + std::to_string(wait_until_step_) +
                            " before starting training.");
    const double start = clock_.now();
    std::int64_t last_logged_step = 0;
    for (;;) {
      const auto current = static_cast<std::int64_t>(backend.global_step());
      if (current >= wait_until_step_) {
        started_ = true;
        return;
      }
      if (stop_.stop_requested() || stop_requested_in_this_run)
        throw StopIteration("GlobalStepWaiterHook: stop requested while waiting for global step " +
                            std::to_string(wait_until_step_) + ".");
      const double waited = clock_.now() - start;
      if (options_.timeout_secs && waited >= *options_.timeout_secs)
        throw DeadlineExceededError(
            "GlobalStepWaiterHook: global step " + std::to_string(wait_until_step_) +
            " not reached after " + std::to_string(*options_.timeout_secs) +
            " s; it is at " + std::to_string(current) + ".");
      if (current - last_logged_step > 1000) {
        log(Severity::info, "Waiting for global step " + std::to_string(wait_until_step_) +
                                " before starting training. Current step is " +
                                std::to_string(current) + ".");
        last_logged_step = current;
      }
      double slice = options_.poll_interval_secs;
      if (options_.timeout_secs && *options_.timeout_secs - waited < slice)
        slice = *options_.timeout_secs - waited;
      if constexpr (WaitableGlobalStep<Backend>) {
        backend.wait_for_global_step(
            wait_until_step_, stop_,
            std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(slice)));
      } else {
        detail::sleep_on(clock_, slice, stop_);
      }
    }
  }

  std::int64_t wait_until_step_;
  GlobalStepWaiterOptions options_;
  [[no_unique_address]] C clock_;
  std::stop_token stop_;
  bool started_ = false;
};

}  // namespace runhooks
