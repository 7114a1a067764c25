// SessionRunContext: what every hook sees of one run, shared by all hooks for that run.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/session_run_args.hpp>

namespace runhooks {

// One context per run(), handed to every hook's before_run() and after_run().
//   original_args(): what the caller passed to run() (SessionRunArgs<> for a plain run()).
//   session():       the backend itself; calls on it bypass the hooks (TensorFlow hands hooks the
//                    raw tf.Session here too).
//   request_stop():  ask the session to stop after this run. It never cancels the current run,
//                    every later hook still sees this run, and the session reads the request
//                    only after the last after_run() has returned.
template <class Backend, class OriginalArgs = SessionRunArgs<>>
class SessionRunContext {
 public:
  constexpr SessionRunContext(const OriginalArgs& original_args, Backend& session) noexcept
      : original_args_(&original_args), session_(&session) {}

  constexpr const OriginalArgs& original_args() const noexcept { return *original_args_; }
  constexpr Backend& session() const noexcept { return *session_; }
  constexpr void request_stop() noexcept { stop_requested_ = true; }
  constexpr bool stop_requested() const noexcept { return stop_requested_; }

 private:
  const OriginalArgs* original_args_;
  Backend* session_;
  bool stop_requested_ = false;
};

}  // namespace runhooks
