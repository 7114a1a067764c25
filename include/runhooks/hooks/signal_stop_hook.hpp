// SignalStopHook: the first SIGINT or SIGTERM stops training at the next step boundary, so that
// every end() runs (and a checkpoint hook writes its final checkpoint), or ends a recovery at
// once; a second one terminates.
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <signal.h>

#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

struct SignalStopOptions {
  std::vector<int> signals{SIGINT, SIGTERM};
};

namespace detail {

// Process-wide, as signal dispositions are. Plain lock-free atomics and arrays written only while
// no handler of ours is installed for that signal: everything the handler touches is
// async-signal-safe.
inline constexpr int signal_stop_max = 65;  // above every Linux signal number (SIGRTMAX is 64)
inline constinit std::atomic<bool> signal_stop_requested{false};
inline constinit std::atomic<int> signal_stop_signal{0};
inline struct ::sigaction signal_stop_previous[signal_stop_max];
inline constinit bool signal_stop_installed[signal_stop_max] = {};
inline constinit int signal_stop_users = 0;  // hooks between begin() and end(), under the mutex
inline std::mutex& signal_stop_mutex() {
  static std::mutex mutex;
  return mutex;
}
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

// The first signal sets the flag and wakes a session waiting to re-create its backend (which
// then sees the flag: see StopSource in concepts.hpp); a second one puts back the
// handler that was there before us and raises the signal again, which that handler (by default:
// terminate) then receives once this one returns.
inline void signal_stop_handler(int signal) {
  const int saved_errno = errno;
  if (!signal_stop_requested.exchange(true, std::memory_order_relaxed)) {
    signal_stop_signal.store(signal, std::memory_order_relaxed);
    wake_stop_waiters();
  } else if (signal > 0 && signal < signal_stop_max) {
    ::sigaction(signal, &signal_stop_previous[signal], nullptr);
    ::raise(signal);
  }
  errno = saved_errno;
}

inline std::string signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace detail

// Installs its handler for each configured signal in begin() and puts the previous handlers back
// in end() (or in its destructor, when the session ends by an exception). The first signal asks
// the session to stop after the step in progress: the loop ends normally and every end() runs.
// While the session is creating or re-creating its backend (no step runs, so no after_run), the
// session asks the hook itself (it models StopSource): the signal ends the retries and wakes the
// back-off at once, and the session stops without a backend.
// A second signal (the user insists, or the run is stuck) restores the previous handler and
// re-raises, so the default action (terminate) takes place. The handler only sets a lock-free
// atomic flag. Per step: one relaxed load of that flag and a test.
//
// Signal dispositions belong to the process: while several sessions hold a SignalStopHook, they
// share one handler and one flag (the first signal stops all of them), installed by the first
// begin() and removed by the last end(). A program that must keep its own handler for SIGINT or
// SIGTERM lists other signals in SignalStopOptions::signals.
class SignalStopHook {
 public:
  explicit SignalStopHook(SignalStopOptions options = {}) : options_(std::move(options)) {
    for (const int signal : options_.signals)
      if (signal <= 0 || signal >= detail::signal_stop_max || signal == SIGKILL ||
          signal == SIGSTOP)
        throw std::invalid_argument("runhooks: SignalStopOptions::signals holds " +
                                    std::to_string(signal) +
                                    ", which is not a signal a handler can catch.");
  }
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names SignalStopOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                SignalStopOptions, &SignalStopOptions::signals>>
  explicit SignalStopHook(...) = delete;  // Misspelt field? Write SignalStopOptions{...} to see which
  SignalStopHook(const SignalStopHook&) = delete;
  SignalStopHook& operator=(const SignalStopHook&) = delete;
  SignalStopHook(SignalStopHook&& other) noexcept
      : options_(std::move(other.options_)), installed_(std::exchange(other.installed_, false)),
        reported_(other.reported_) {}
  SignalStopHook& operator=(SignalStopHook&&) = delete;
  ~SignalStopHook() { uninstall(); }

  void begin() {
    if (installed_) return;
    std::lock_guard lock(detail::signal_stop_mutex());
    if (detail::signal_stop_users == 0) {
      detail::signal_stop_requested.store(false, std::memory_order_relaxed);
      detail::signal_stop_signal.store(0, std::memory_order_relaxed);
    }
    for (const int signal : options_.signals) {
      if (detail::signal_stop_installed[signal]) continue;
      struct ::sigaction action {};
      action.sa_handler = &detail::signal_stop_handler;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;  // a write or fsync in progress is resumed, not failed
      if (::sigaction(signal, &action, &detail::signal_stop_previous[signal]) != 0)
        throw std::runtime_error("runhooks: SignalStopHook cannot install a handler for " +
                                 detail::signal_name(signal) + ": " +
                                 std::error_code(errno, std::generic_category()).message());
      detail::signal_stop_installed[signal] = true;
    }
    ++detail::signal_stop_users;
    installed_ = true;
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (detail::signal_stop_requested.load(std::memory_order_relaxed)) [[unlikely]] {
      run_context.request_stop();
      if (!reported_) report();  // out of line, and without the run context, which would then
                                 // have to live in memory on every step
    }
  }

  template <class Backend>
  void end(Backend&) {
    uninstall();
  }

  const SignalStopOptions& options() const noexcept { return options_; }

  // Whether a signal asked to stop, and which (0: none), since the first begin() of the hooks
  // alive now.
  static bool stop_requested() noexcept {
    return detail::signal_stop_requested.load(std::memory_order_relaxed);
  }
  static int received_signal() noexcept {
    return detail::signal_stop_signal.load(std::memory_order_relaxed);
  }
  // Its name, "SIGTERM", "SIGINT", ... ("" when none).
  static std::string received_signal_name() {
    const int signal = received_signal();
    return signal == 0 ? std::string() : detail::signal_name(signal);
  }
  // For the session's log line when the signal ends a recovery: "SIGTERM received".
  static std::string stop_reason() { return detail::signal_name(received_signal()) + " received"; }

 private:
  [[gnu::noinline]] void report() {
    reported_ = true;
    const std::string name = detail::signal_name(received_signal());
    log(Severity::warning, "runhooks: " + name +
                               " received: stopping after this step; send it again to terminate "
                               "at once.");
  }

  void uninstall() noexcept {
    if (!installed_) return;
    installed_ = false;
    std::lock_guard lock(detail::signal_stop_mutex());
    if (--detail::signal_stop_users > 0) return;
    for (int signal = 1; signal < detail::signal_stop_max; ++signal) {
      if (!detail::signal_stop_installed[signal]) continue;
      ::sigaction(signal, &detail::signal_stop_previous[signal], nullptr);
      detail::signal_stop_installed[signal] = false;
    }
  }

  SignalStopOptions options_;
  bool installed_ = false;
  bool reported_ = false;
};

}  // namespace runhooks
