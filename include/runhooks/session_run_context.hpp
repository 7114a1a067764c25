// SessionRunContext: what every hook sees of one run, shared by all hooks for that run.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>

#include <runhooks/session_run_args.hpp>

namespace runhooks {

// One context per run(), handed to every hook's before_run() and after_run().
//   original_args(): what the caller passed to run() (SessionRunArgs<> for a plain run()).
//   session():       the backend itself; calls on it bypass the hooks (TensorFlow hands hooks the
//                    raw tf.Session here too).
//   request_stop():  ask the session to stop after this run. It never cancels the current run,
//                    every later hook still sees this run, and the session reads the request
//                    only after the last after_run() has returned.
//   global_step():   the backend's global_step(), read once per run however many hooks ask:
//                    before the step in before_run(), after it in after_run(). One read of a
//                    shared or remote global step instead of one per hook.
template <class Backend, class OriginalArgs = SessionRunArgs<>>
class SessionRunContext {
 public:
  constexpr SessionRunContext(const OriginalArgs& original_args, Backend& session) noexcept
      : original_args_(&original_args), session_(&session) {}

  constexpr const OriginalArgs& original_args() const noexcept { return *original_args_; }
  constexpr Backend& session() const noexcept { return *session_; }
  constexpr void request_stop() noexcept { stop_requested_ = true; }
  constexpr bool stop_requested() const noexcept { return stop_requested_; }

  constexpr std::int64_t global_step()
    requires requires(const Backend& b) { static_cast<std::int64_t>(b.global_step()); }
  {
    if (!has_global_step_) {
      global_step_ = static_cast<std::int64_t>(session_->global_step());
      has_global_step_ = true;
    }
    return global_step_;
  }

  // Called by the session after the backend's step: the next global_step() reads it again.
  constexpr void step_ran() noexcept { has_global_step_ = false; }

 private:
  const OriginalArgs* original_args_;
  Backend* session_;
  std::int64_t global_step_ = 0;
  bool has_global_step_ = false;
  bool stop_requested_ = false;
};

namespace detail {
// The global step a hook's after_run sees: the run context's cached read, or the backend's for a
// context of another type (hooks driven by hand).
template <class Ctx>
constexpr std::int64_t global_step_of(Ctx& run_context) {
  if constexpr (requires { run_context.global_step(); })
    return run_context.global_step();
  else
    return static_cast<std::int64_t>(run_context.session().global_step());
}
}  // namespace detail

}  // namespace runhooks
