// Coordinator: a stop flag shared by the session, its hooks and their threads, with the first
// error a thread reported (TensorFlow's tf.train.Coordinator, on std::stop_source/std::jthread).
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <list>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>

#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/coordinator_slot.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/detail/type_list.hpp>
#include <runhooks/error.hpp>

namespace runhooks {

// request_stop() may be called from any thread; the first exception passed to it is kept and
// re-thrown by raise_requested_exception() and join(). Threads started with start() receive a
// std::stop_token that is stopped by request_stop(). A MonitoredSession owns one and hands it to
// the hooks whose after_create_session() takes it: as `Coordinator&` to a hook that may stop it
// or start threads on it (the session then polls its stop flag on every step), as
// `const Coordinator&` to one that only reads it (stop_token(), should_stop(); no poll). Where
// TensorFlow makes a new Coordinator when it re-creates the session, the session joins its
// coordinator and reset()s it: references stay valid and then refer to the fresh state.
class Coordinator {
 public:
  Coordinator() = default;
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  ~Coordinator() { request_stop(); }  // the jthreads join as the list is destroyed

  // Stops the coordinator. The first exception passed in is kept; later ones are dropped, as in
  // TensorFlow. A session waiting to re-create its backend wakes and ends its recovery.
  void request_stop(std::exception_ptr error = nullptr) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (error && !error_) error_ = std::move(error);
      stopped_.store(true, std::memory_order_seq_cst);
      if (raise_ != nullptr) raise_->store(true, std::memory_order_seq_cst);
      source_.request_stop();
    }
    detail::wake_stop_waiters();
  }

  // A hook that took `const Coordinator&` reads the coordinator and cannot stop it: the session
  // does not poll such a coordinator. Diagnosed here rather than as "discards qualifiers".
  template <class... Args>
  void request_stop(Args&&...) const {
    static_assert(detail::always_false<Args...>,
                  "runhooks: this hook took `const runhooks::Coordinator&` (or `auto&`, which "
                  "deduces const), which only reads the coordinator. To stop it or start "
                  "threads on it, take `runhooks::Coordinator& coord` in after_create_session.");
  }
  template <class F>
  void start(F) const {
    static_assert(detail::always_false<F>,
                  "runhooks: this hook took `const runhooks::Coordinator&` (or `auto&`, which "
                  "deduces const), which only reads the coordinator. To stop it or start "
                  "threads on it, take `runhooks::Coordinator& coord` in after_create_session.");
  }

  // One relaxed load: what MonitoredSession::should_stop() reads on every step while someone
  // holds the coordinator.
  bool should_stop() const noexcept { return stopped_.load(std::memory_order_relaxed); }
  const std::atomic<bool>& stop_flag() const noexcept { return stopped_; }

  // A flag of the owning session that request_stop() raises too: the one the session loads on
  // every step while another thread may stop it (the session lowers it itself).
  void raise_on_stop(std::atomic<bool>* flag) noexcept {
    std::lock_guard lock(mutex_);
    raise_ = flag;
  }

  std::stop_token stop_token() const {
    std::lock_guard lock(mutex_);
    return source_.get_token();
  }

  // Back to a fresh, unstopped coordinator with no reported error. Call it after join(): the
  // threads started before are gone by then, and their tokens stay stopped.
  void reset() {
    std::lock_guard lock(mutex_);
    error_ = nullptr;
    source_ = std::stop_source();
    stopped_.store(false, std::memory_order_relaxed);
  }

  // Re-throws the exception reported to request_stop(), if any.
  void raise_requested_exception() const {
    std::exception_ptr error;
    {
      std::lock_guard lock(mutex_);
      error = error_;
    }
    if (error) std::rethrow_exception(error);
  }

  std::exception_ptr requested_exception() const {
    std::lock_guard lock(mutex_);
    return error_;
  }

  // Runs f(stop_token) on a new thread owned by the coordinator. An exception escaping f is
  // reported with request_stop(exception), which stops every other thread too.
  template <class F>
  void start(F f) {
    std::lock_guard lock(mutex_);
    ++running_;
    // The coordinator's token, not the jthread's own: request_stop() must reach the thread.
    threads_.emplace_back([this, f = std::move(f), token = source_.get_token()]() mutable {
      try {
        f(std::move(token));
      } catch (...) {
        request_stop(std::current_exception());
      }
      std::lock_guard inner(mutex_);
      --running_;
      finished_.notify_all();
    });
  }

  // Asks every thread to stop and waits up to `grace` for them to finish. Then re-throws the
  // reported exception, if any. Threads still running after the grace period are an error
  // (UsageError) unless ignore_live_threads is set; they are joined either way before return,
  // since a std::jthread cannot be abandoned safely.
  void join(std::chrono::duration<double> grace = std::chrono::seconds(120),
            bool ignore_live_threads = false) {
    detail::checked_secs("Coordinator::join's grace period", grace.count());
    request_stop();
    std::size_t still_running = 0;
    {
      std::unique_lock lock(mutex_);
      finished_.wait_for(lock, grace, [&] { return running_ == 0; });
      still_running = running_;
    }
    std::list<std::jthread> threads;
    {
      std::lock_guard lock(mutex_);
      threads.swap(threads_);
    }
    threads.clear();  // joins
    raise_requested_exception();
    if (still_running != 0 && !ignore_live_threads)
      throw UsageError("Coordinator stopped with threads still running: " +
                       std::to_string(still_running));
  }

  // What a session does when it ends a backend's generation or closes: join with the grace
  // period, ignoring live threads (joined anyway), re-throwing the reported error.
  void join_for_session(double grace_secs) {
    join(std::chrono::duration<double>(grace_secs), /*ignore_live_threads=*/true);
  }

 private:
  std::atomic<bool> stopped_{false};
  std::atomic<bool>* raise_ = nullptr;  // the owning session's copy, see raise_on_stop()
  std::stop_source source_;
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  std::exception_ptr error_;
  std::size_t running_ = 0;
  std::list<std::jthread> threads_;
};

}  // namespace runhooks
