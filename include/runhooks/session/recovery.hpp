// The session's life around its steps: creating the backend, ending a generation, recovering a
// lost backend, a stop that ends the recovery, closing, and the one list of which error wins.
#pragma once

#include <runhooks/detail/config.hpp>

#include <exception>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/describe_exception.hpp>
#include <runhooks/detail/hot_path.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session/rollback.hpp>
#include <runhooks/session/stop_state.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks::detail {

// Which error wins. TensorFlow's MonitoredSession is three wrappers, _RecoverableSession(
// _CoordinatedSession(_HookedSession(session))), and each settles a conflict between errors;
// these are their rules, in one place (tf-semantics.md §1.5-§1.7 and cases G68-G73), with the
// member of SessionRecovery that applies each. "A thread's error" is one a thread reported to
// the session's coordinator; "a preemption" is an AbortedError or UnavailableError (or a
// subclass), TensorFlow's _PREEMPTION_ERRORS.
//
//  1. A preemption is recovered from, as the retry policy allows; any other error propagates.
//     A SingularMonitoredSession never recovers (§1.7, §1.9). A rollback (RollbackRequest, an
//     AbortedError a hook throws) is recovered from at once, without the policy, and must find a
//     checkpoint: a RollbackError ends the recovery otherwise (runhooks). [with_recovery,
//     creation_failed, retry, no_checkpoint_to_roll_back_to]
//  2. In a hooked step, a thread's preemption beats the step's own error when that is not a
//     preemption: it is raised instead, so that the session recovers from what really happened
//     (_CoordinatedSession.run; G71, test_recovery_from_session_getting_stuck), in a
//     SingularMonitoredSession too. [raise_thread_preemption]
//  3. A thread's error that is not a preemption beats everything after it: found when a
//     generation ends, it waits and the session stops; it ends a recovery in progress, is raised
//     instead of the error that ended the recovery or the creation, and instead of run()'s "Run
//     called even after should_stop requested" (G70: close() raises it). It is raised once.
//     [end_generation, keep_error, retry, throw_for, refuse_run]
//  4. A stop beats the recovery (runhooks; TensorFlow retries regardless): a stop asked for
//     while the backend is being created or re-created (stop_arrived) ends the retries; the
//     session stops without a backend, logs one line with the last failure, and raises nothing.
//     Rule 3 still comes first: a thread's error waiting is raised. [retry, stop_arrived,
//     stopped_during_recovery, stopped_result]
//  5. A recovery ends with an error when the policy gives up (the last preemption) or when
//     re-creating fails with an error that is not a preemption (that error). [retry, throw_for]
//  6. should_stop() never raises in a MonitoredSession: a thread's preemption re-creates the
//     backend there, even after a hook asked to stop (the coordinator's error is read before the
//     hooks' flag), and an error that ends that recovery is logged and means "stop"
//     (_RecoverableSession._check_stop; G69). A SingularMonitoredSession's should_stop()
//     re-throws the thread's error (§1.5). [should_stop_slow]
//  7. After a stop, run() is refused; a stop that only the hooks asked for is refused inside the
//     hooked step instead, where rule 2 may replace the refusal by a thread's preemption, and the
//     session recovers (_HookedSession.run under _RecoverableSession).
//     [refuse_unless_hooks_stopped, refuse_run; SessionStep::run_step]
//  8. close() raises the first of: an end() that threw, a thread's error waiting (rule 3), one a
//     thread reports at the last join; but not the error run() raised already, and a
//     MonitoredSession logs a preemption reported at shutdown, with nothing left to recover
//     (_WrappedSession.close, §1.6). Where nothing may be thrown (the destructor, run_loop after
//     its body threw) these are logged, and the body's exception propagates (__exit__, §1.6).
//     [close_internal, close_logging_errors]

inline bool is_preemption(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const AbortedError&) {
    return true;
  } catch (const UnavailableError&) {
    return true;
  } catch (...) {
    return false;
  }
}


[[noreturn]] inline void throw_run_after_stop(bool closed) {
  if (closed) throw UsageError("Run called on a closed session.");
  throw UsageError("Run called even after should_stop requested.");
}

// What a run() whose recovery a stop ended returns: its step did not run, so no value.
template <class T>
inline constexpr bool is_run_values = false;
template <class Args>
inline constexpr bool is_run_values<SessionRunValues<Args>> = true;

// Creation, recovery and closing, and the rules above: TensorFlow's _RecoverableSession and
// _CoordinatedSession. A base of BasicMonitoredSession (Session), whose members it reads through
// self(); it holds nothing itself.
template <class Session>
class SessionRecovery {
 protected:
  RUNHOOKS_DETAIL_HOT Session& self() noexcept { return static_cast<Session&>(*this); }
  RUNHOOKS_DETAIL_HOT StopState& state() noexcept { return self().state_; }
  RUNHOOKS_DETAIL_HOT auto& slot() noexcept { return self().slot_; }

  // ---- Creation --------------------------------------------------------------------------

  void create_first() {
    try {
      create_session();
    } catch (...) {
      creation_failed(std::current_exception());
    }
  }

  // The first creation failed: a preemption is recovered from as the policy allows, anything
  // else is raised. Out of line, so that the constructor stays small enough to be inlined and
  // the compiler sees the session's flags in the loop that follows.
  // A constructor that throws runs no destructor: the checkpoint saver (held by std::ref, it
  // outlives the session) is first given back its empty hook-state access.
  [[gnu::noinline, gnu::cold]] void creation_failed(const std::exception_ptr& error) {
    end_generation();
    try {
      if constexpr (Session::recoverable) {
        if (detail::is_preemption(error)) {
          int failures = 1;
          if (const std::exception_ptr end = recover(failures, error)) throw_for(end);
          return;
        }
      }
      throw_for(error);
    } catch (...) {
      self().detach_hook_states();
      throw;
    }
  }

  // The backend (made by the creator, if there is one), a fresh coordinator, and every hook's
  // after_create_session(): TensorFlow's _CoordinatedSessionCreator.create_session.
  void create_session() {
    slot().create();
    self().restore_hook_states();  // the hooks' states saved with the backend's (hook_state.hpp)
    start_generation();
  }
  void start_generation() {
    state().coord.reset();
    after_create_session();
  }

  void after_create_session() {
    using backend_type = typename Session::backend_type;
    self().for_each_hook([&](auto& hook) {
      using Hook = std::remove_cvref_t<decltype(hook)>;
      if constexpr (TakesCoordinator<Hook, backend_type> || ReadsCoordinator<Hook, backend_type>)
        call_after_create_session(hook, slot().get(), state().coord.get());
      else if constexpr (HasAfterCreateSession<Hook, backend_type>)
        hook.after_create_session(slot().get());
    });
  }

  // Ends the current backend's generation, whichever hook or step failed: stops the
  // coordinator and joins every thread started on it (waiting up to the grace period, then
  // joining anyway) before the backend they may use is destroyed. An error one of them reported
  // that is not a preemption is kept, to be raised by run() or close().
  void end_generation() noexcept {
    const std::exception_ptr error = state().coord.stop_and_join(state().grace_secs);
    if (error && !detail::is_preemption(error) && error != state().raised_error) keep_error(error);
    if constexpr (Session::recoverable) slot().destroy();
  }

  // ---- Recovery --------------------------------------------------------------------------

  // Runs f; on a preemption error (from the backend, a hook, or reported to the coordinator)
  // re-creates the backend and runs f again, as the retry policy allows.
  template <class F>
  RUNHOOKS_DETAIL_HOT decltype(auto) with_recovery(F&& f) {
    if constexpr (!Session::recoverable) {
      return f();
    } else {
      for (int failures = 1;; ++failures) {
        try {
          return f();
        } catch (...) {
          const std::exception_ptr error = std::current_exception();
          if (state().closed || !detail::is_preemption(error)) throw;
          if (const std::exception_ptr end = recover(failures, error)) throw_for(end);
        }
        if (!slot().alive()) [[unlikely]]  // a stop ended the recovery
          return stopped_result<decltype(f())>();
      }
    }
  }

  // TensorFlow's _RecoverableSession, after the failures-th consecutive preemption error
  // (`failure`, the latest): end the lost generation, and make the session again (begin() is not
  // called again) as long as the retry policy allows; a preemption error while doing so is one
  // more failure. The hooks' stop requests are cleared once that succeeded. Returns null then;
  // otherwise the session is left without a backend, stopped, and this returns the error that
  // ends the recovery: the failure the policy gave up on, or a fatal error while re-creating.
  // A coordinator thread's error found on the way waits in pending_error, and wins where raised.
  //
  // A stop always wins (runhooks; TensorFlow retries regardless): a stop asked for during the
  // recovery (stop_arrived()) is looked for before every attempt, throughout the back-off,
  // which it wakes, and once the creator returns a backend, before any hook sees it. It ends
  // the recovery: the session is left stopped without a backend, one line is logged, and this
  // returns null. An attempt in progress is not interrupted: its creator's own waits are its own.
  std::exception_ptr recover(int& failures, std::exception_ptr failure) {
    detail::RecoveringScope recovering(state());
    end_generation();
    // Until a new backend is ready the session should stop and run() must not reach the
    // backend (TensorFlow: should_stop() is true while _sess is None).
    state().set_stop();
    try {
      std::exception_ptr end = retry(failures, std::move(failure));
      if (!slot().alive()) state().set_stop();  // raises again the flag retry() listened on
      return end;
    } catch (...) {  // a policy's invalid delay
      state().set_stop();
      throw;
    }
  }

  // recover()'s attempts. Leaves `raised` lowered unless it re-created the backend.
  std::exception_ptr retry(int& failures, std::exception_ptr failure) {
    for (;; ++failures) {
      if (state().pending_error) return failure;
      // The lost generation's threads are joined: from here on, the coordinator's stop (which
      // raises this flag) is someone's request to stop.
      state().raised.store(false, std::memory_order_seq_cst);
      if (stop_arrived()) return stopped_during_recovery(failures, failure);
      // A rollback (RollbackRequest, session/rollback.hpp) is asked for, not suffered: at once,
      // whatever the retry policy says, and logged as what it is.
      const bool rollback = detail::is_rollback(failure);
      if (rollback) {
        log(Severity::info, "runhooks: rolling back to the latest checkpoint: " +
                                detail::describe_exception(failure));
      } else {
        const std::optional<double> delay = slot().creator.policy().next_delay(failures);
        if (!delay) return failure;
        const double secs = detail::checked_secs("the retry policy's next_delay()", *delay);
        log(Severity::info, "runhooks: backend lost; re-creating it (attempt " +
                                std::to_string(failures) + ", after " +
                                detail::format_number(secs) +
                                " s): " + detail::describe_exception(failure));
        if (detail::wait_unless_stopped(secs, [this] { return stop_arrived(); }))
          return stopped_during_recovery(failures, failure);
      }
      try {
        slot().create();
        if (stop_arrived()) {
          slot().destroy();  // no hook has seen it
          return stopped_during_recovery(failures, failure);
        }
        if (rollback) {
          if (std::exception_ptr nowhere = no_checkpoint_to_roll_back_to()) {
            slot().destroy();  // no hook has seen it
            return nowhere;
          }
        }
        self().restore_hook_states();
        start_generation();
        state().clear_stop();
        return nullptr;
      } catch (...) {
        failure = std::current_exception();
        end_generation();
        if (!detail::is_preemption(failure)) return failure;
      }
    }
  }

  // After a rollback's re-creation: null if the creator restored a checkpoint, else the
  // RollbackError that ends the recovery (a fresh backend is no rollback).
  std::exception_ptr no_checkpoint_to_roll_back_to() {
    auto& creator = slot().creator;
    if constexpr (requires { static_cast<bool>(creator.restored_from()); }) {
      if (creator.restored_from()) return nullptr;
      return std::make_exception_ptr(RollbackError(
          "runhooks: a rollback found no checkpoint to go back to (there is none yet); the "
          "session stops without a backend. Save one before the first rollback can come "
          "(SpikeOptions::warmup), or stop instead."));
    } else {
      return std::make_exception_ptr(RollbackError(
          "runhooks: a rollback needs a session creator that restores checkpoints "
          "(ChiefSessionCreator, make_training_session with a checkpoint_dir); this session's "
          "makes a fresh backend, so the session stops without one."));
    }
  }

  // Whether a stop was asked for while the loop's thread creates or re-creates the backend,
  // where no after_run runs: by request_stop() from another thread, by stopping the coordinator
  // (which raises `raised`; retry() lowers it first), or by a hook that models StopSource.
  bool stop_arrived() {
    if (state().recovering.load(std::memory_order_seq_cst) == 2 ||
        state().raised.load(std::memory_order_seq_cst))
      return true;
    bool any = false;
    self().for_each_hook([&](auto& hook) {
      if constexpr (StopSource<std::remove_cvref_t<decltype(hook)>>)
        any = any || static_cast<bool>(hook.stop_requested());
    });
    return any;
  }

  [[gnu::noinline, gnu::cold]] std::exception_ptr stopped_during_recovery(
      int failures, const std::exception_ptr& failure) {
    std::string why;
    if (state().recovering.load(std::memory_order_seq_cst) == 2)
      why = "request_stop() was called";
    else if (state().raised.load(std::memory_order_seq_cst))
      why = "the coordinator was stopped";
    self().for_each_hook([&](auto& hook) {
      if constexpr (StopSource<std::remove_cvref_t<decltype(hook)>>)
        if (why.empty() && hook.stop_requested()) why = hook.stop_reason();
    });
    log(Severity::warning,
        "runhooks: stopped during recovery (" + why + "): the backend is not created again after " +
            (failures == 1 ? std::string("1 failure") :
                             std::to_string(failures) + " consecutive failures") +
            ", and the session stops without one. Last error: " + detail::describe_exception(failure));
    return nullptr;
  }

  // What run() or run_step_fn() returns when a stop ended the recovery (see their comments).
  template <class Result>
  static Result stopped_result() {
    if constexpr (std::is_void_v<Result>)
      return;
    else if constexpr (detail::is_run_values<Result>)
      return Result{};
    else
      throw StopIteration("runhooks: the session stopped during recovery; step_fn was not run "
                          "again and has no result.");
  }

  // should_stop() once a flag is raised (rule 6).
  [[gnu::noinline]] bool should_stop_slow() {
    if (state().closed || state().pending_error) return true;
    // TensorFlow reads the coordinator's error before the hooks' stop flag: a preemption
    // re-creates the backend (which resets that flag) even after a hook asked to stop.
    const std::exception_ptr error = state().coord.error();
    if constexpr (Session::recoverable) {
      if (slot().alive() && detail::is_preemption(error)) {
        // TensorFlow's should_stop() never raises in a MonitoredSession: an error that ends
        // the recovery means "stop", and is logged rather than lost; a thread's error waits for
        // run() or close().
        try {
          int failures = 1;
          const std::exception_ptr end = recover(failures, error);
          if (end && !detail::is_preemption(end))  // a fatal error while re-creating
            log(Severity::warning,
                "runhooks: re-creating the backend failed: " + detail::describe_exception(end));
          return state().stop;  // the policy gave up, an error waits, or the caller asked to stop
        } catch (const std::exception& e) {
          log(Severity::warning, std::string("runhooks: re-creating the backend failed: ") +
                                     e.what());
          return true;
        }
      }
    }
    if constexpr (Session::singular) {
      if (error) {
        // The error leaves the loop here: the on_exception hooks see it first.
        if constexpr (Session::handles_exceptions) self().exception_escapes(error);
        std::rethrow_exception(error);
      }
    }
    return true;
  }

  // ---- Refusals and raising (rules 2, 3, 7) ----------------------------------------------

  // The refusals before the hooked run: a closed session, a thread's error waiting, the caller's
  // stop, no backend. A stop that only the hooks asked for is refused inside the hooked run
  // (run_step), as TensorFlow's _HookedSession does, where a preemption that a coordinator
  // thread reported takes the refusal's place and the session recovers.
  [[gnu::noinline]] void refuse_unless_hooks_stopped() {
    if (state().closed || state().pending_error || state().caller_stop || !slot().alive())
      refuse_run();
  }

  // run() after a stop: raises the error a coordinator thread reported, if one waits, else
  // TensorFlow's "Run called even after should_stop requested".
  [[noreturn, gnu::noinline]] void refuse_run() {
    if (state().pending_error) {
      state().raised_error = std::exchange(state().pending_error, nullptr);
      std::rethrow_exception(state().raised_error);
    }
    detail::throw_run_after_stop(state().closed);
  }

  // Keeps an error a coordinator thread reported until run() or close() can raise it; the session
  // stops meanwhile (TensorFlow raises it from the run that triggered the recovery, or close()).
  void keep_error(std::exception_ptr error) noexcept {
    if (!state().pending_error) state().pending_error = std::move(error);
    state().set_stop();
  }

  // Rethrows `error`, or the coordinator thread's error that ending the generation found instead
  // (TensorFlow's _CoordinatedSession: what a thread reported wins).
  [[noreturn]] void throw_for(const std::exception_ptr& error) {
    if (state().pending_error) refuse_run();
    std::rethrow_exception(error);
  }

  // In a handler: throws the preemption a coordinator thread reported, if there is one and the
  // error being handled is not a preemption itself.
  [[gnu::noinline]] void raise_thread_preemption() {
    // Without a backend (closed, or a recovery that gave up) the coordinator's error belongs to
    // a generation that has ended.
    if (state().closed || !slot().alive() || !state().coord.exists()) return;
    const std::exception_ptr thread_error = state().coord.error();
    if (detail::is_preemption(thread_error) &&
        !detail::is_preemption(std::current_exception()))
      std::rethrow_exception(thread_error);
  }

  // ---- Closing (rule 8) ------------------------------------------------------------------

  // Closes where an error cannot be thrown: in the destructor, and in run_loop when its body
  // threw anything but a clean end (then without end(), as TensorFlow's __exit__ does, keeping
  // the body's exception). Errors while closing are logged.
  void close_logging_errors(bool call_end, const char* where) noexcept {
    if (state().closed) return;
    try {
      close_internal(call_end);
    } catch (const std::exception& e) {
      log(Severity::warning,
          std::string("runhooks: error while closing a session ") + where + ": " + e.what());
    } catch (...) {
      log(Severity::warning, std::string("runhooks: unknown error while closing a session ") + where);
    }
  }

  void close_internal(bool call_end) {
    using backend_type = typename Session::backend_type;
    state().closed = true;
    state().set_stop();
    std::exception_ptr first_error;
    if (call_end && slot().alive()) {
      try {
        self().for_each_hook([&](auto& hook) {
          if constexpr (HasEnd<std::remove_cvref_t<decltype(hook)>, backend_type>)
            hook.end(slot().get());
        });
      } catch (...) {
        first_error = std::current_exception();
      }
    }
    std::exception_ptr thread_error = state().coord.stop_and_join(state().grace_secs);
    if (Session::recoverable && detail::is_preemption(thread_error)) {
      // TensorFlow's _WrappedSession.close logs preemption errors at shutdown: there is no
      // step left to recover.
      log(Severity::warning, "runhooks: ignoring an error reported to the coordinator while "
                             "closing (nothing left to recover): " +
                                 detail::describe_exception(thread_error));
      thread_error = nullptr;
    }
    if (thread_error && thread_error == state().raised_error) thread_error = nullptr;
    for (const std::exception_ptr& error : {first_error, state().pending_error, thread_error}) {
      if (error) {
        state().pending_error = nullptr;
        std::rethrow_exception(error);
      }
    }
  }
};

}  // namespace runhooks::detail
