// StepContext: what step_fn sees in session.run_step_fn(step_fn), TensorFlow's StepContext.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/error.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

// What step_fn sees in run_step_fn (TensorFlow's StepContext). Session is the
// BasicMonitoredSession that made it, whose friend it is.
template <class Session>
class StepContext {
 public:
  explicit StepContext(Session& session) noexcept : session_(&session) {}

  // The backend: runs made through it call no hooks.
  auto& session() const { return session_->raw_session(); }

  // A hooked run without the recovery layer: a preemption error leaves step_fn, and the whole
  // step_fn is run again.
  template <class... Items>
  auto run_with_hooks(const SessionRunArgs<Items...>& args) {
    if (session_->stop_requested()) [[unlikely]] {
      session_->refuse_unless_hooks_stopped();
      return session_->template run_step<true>(args);
    }
    return session_->template run_step<false>(args);
  }
  void run_with_hooks() { run_with_hooks(SessionRunArgs<>{}); }

  // TensorFlow raises StopIteration here, and so do we: run_loop() treats it as a clean end.
  // The session's own request_stop() sets a flag instead.
  [[noreturn]] void request_stop() const {
    throw StopIteration("step_fn has requested the iterations to stop.");
  }

 private:
  Session* session_;
};

}  // namespace runhooks
