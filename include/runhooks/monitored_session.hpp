// MonitoredSession: runs a backend's steps with hooks composed at compile time, under
// TensorFlow's SessionRunHook contract, and recovers a lost backend. The public face: each
// concern behind it has its own header under session/.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/hana/at.hpp>
#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/for_each.hpp>

#include <atomic>
#include <cstddef>
#include <exception>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/hook_checks.hpp>
#include <runhooks/detail/hot_path.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/detail/type_list.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session/backend_slot.hpp>
#include <runhooks/session/exception_dispatch.hpp>
#include <runhooks/session/hook_states.hpp>
#include <runhooks/session/recovery.hpp>
#include <runhooks/session/run_loop.hpp>
#include <runhooks/session/step.hpp>
#include <runhooks/session/step_context.hpp>
#include <runhooks/session/stop_state.hpp>
#include <runhooks/session_creator.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

// The session. Source is a backend, or a SessionCreator (any callable returning a backend is
// turned into one). Hooks are any types defining some of the five hook points (see
// concepts.hpp); they are called in declaration order at every point, and a point a hook does
// not define costs nothing. Singular sessions never recover; use SingularMonitoredSession.
//
// Per step, run() costs: the stop check, each defined before_run, the feeds, backend.run(),
// the enabled fetches, each defined after_run, and one test of the run's stop request.
//
// The session holds its backend (session/backend_slot.hpp), its hooks and its stop state
// (session/stop_state.hpp); its private bases, which hold nothing, add what it does around them:
//   session/recovery.hpp  SessionRecovery: creation, recovery, closing, and which error wins;
//   session/step.hpp      SessionStep: the merged step, TensorFlow's _HookedSession.run;
//   session/hook_states.hpp  SessionHookStates: hook state in the checkpoint (StatefulHook).
template <bool Singular, class Source, class... Hooks>
class BasicMonitoredSession
    : detail::SessionRecovery<BasicMonitoredSession<Singular, Source, Hooks...>>,
      detail::SessionStep<BasicMonitoredSession<Singular, Source, Hooks...>>,
      detail::SessionHookStates<BasicMonitoredSession<Singular, Source, Hooks...>> {
  using slot_type = detail::backend_slot<Source>;
  using Recovery = detail::SessionRecovery<BasicMonitoredSession>;
  using Step = detail::SessionStep<BasicMonitoredSession>;
  using HookStates = detail::SessionHookStates<BasicMonitoredSession>;
  using HookStates::attach_hook_states;
  using HookStates::check_hook_states;
  using HookStates::detach_hook_states;
  using HookStates::restore_hook_states;
  using Recovery::create_first;
  using Recovery::with_recovery;
  using Recovery::should_stop_slow;
  using Recovery::refuse_run;
  using Recovery::refuse_unless_hooks_stopped;
  using Recovery::close_internal;
  using Recovery::close_logging_errors;

 public:
  using backend_type = typename slot_type::backend_type;
  static constexpr bool recoverable = slot_type::can_recreate && !Singular;

  static_assert(Backend<backend_type>,
                "runhooks: the backend needs a `void run()` member that runs one step. The "
                "backend type is named in this instantiation of MonitoredSession.");
  static_assert((... && detail::check_hook<detail::unwrap_hook_t<Hooks>, backend_type>::value));
  // A hook takes the coordinator, so another thread may stop the session from the start.
  static constexpr bool always_polls =
      (... || TakesCoordinator<detail::unwrap_hook_t<Hooks>, backend_type>);

  static_assert((0 + ... + StepProfiler<detail::unwrap_hook_t<Hooks>>) <= 1,
                "runhooks: a session takes at most one profiling hook (ProfilerHook).");
  // A hook defines on_exception (concepts.hpp, HasOnException): only then do run() and
  // run_step_fn() catch what leaves them, and a singular should_stop() report what it rethrows,
  // to call it (session/exception_dispatch.hpp).
  static constexpr bool handles_exceptions = detail::any_on_exception<backend_type, Hooks...>;
  // The hooks whose state a checkpoint carries (hook_state.hpp).
  static constexpr std::size_t stateful_hook_count =
      (0 + ... + std::size_t{StatefulHook<detail::unwrap_hook_t<Hooks>>});
  static_assert(detail::hook_states_ordered<detail::unwrap_hook_t<Hooks>...>,
                "runhooks: declare every hook with state (StatefulHook: EarlyStoppingHook, "
                "ReduceLROnPlateauHook, TimeLimitHook) before the CheckpointSaverHook: a save reads "
                "the states after the hooks before it ran, so one after it would be saved a step "
                "behind the backend.");

  // TensorFlow's construction order: every begin(), then the backend, then every
  // after_create_session(). A recoverable session retries a creation that fails with a
  // preemption error as its policy allows; a stop during those retries (see request_stop())
  // ends them, and the constructor returns a stopped session without a backend.
  explicit BasicMonitoredSession(Source source, Hooks... hooks)
      : slot_(std::move(source)), hooks_{std::move(hooks)...} {
    check_hook_states();
    for_each_hook([](auto& hook) {
      if constexpr (HasBegin<std::remove_cvref_t<decltype(hook)>>) hook.begin();
    });
    attach_hook_states();
    if constexpr ((... || (TakesCoordinator<detail::unwrap_hook_t<Hooks>, backend_type> ||
                           ReadsCoordinator<detail::unwrap_hook_t<Hooks>, backend_type>)))
      state_.coord.get();
    if constexpr ((... || TakesCoordinator<detail::unwrap_hook_t<Hooks>, backend_type>))
      state_.poll_coordinator();
    if constexpr (recoverable) {
      detail::RecoveringScope recovering(state_);
      create_first();
    } else {
      create_first();
    }
  }

  BasicMonitoredSession(const BasicMonitoredSession&) = delete;
  BasicMonitoredSession& operator=(const BasicMonitoredSession&) = delete;

  // Leaving the scope normally closes the session and calls every end(), as TensorFlow's
  // `with` block does; leaving it by an exception closes without end(). Errors while closing
  // here are logged, not thrown: call close() (or use run_loop) to receive them.
  ~BasicMonitoredSession() {
    close_logging_errors(std::uncaught_exceptions() <= state_.uncaught, "in its destructor");
    detach_hook_states();
  }

  // True after close(), after a hook or the caller requested a stop, or once the coordinator
  // stopped. One load of a plain flag on the per-step path, plus the coordinator's atomic flag
  // while someone holds the coordinator (see session/stop_state.hpp). A coordinator that
  // stopped with an AbortedError or UnavailableError makes a recoverable session re-create its
  // backend here and return false (TensorFlow does the same; rule 6 of session/recovery.hpp).
  RUNHOOKS_DETAIL_HOT bool should_stop() {
    if constexpr (always_polls) {
      // A hook holds the coordinator from the start: the atomic flag alone, as in a
      // hand-written loop that another thread can stop.
      if (!state_.raised.load(std::memory_order_relaxed)) [[likely]]
        return false;
    } else {
      if (!state_.attention) [[likely]]
        return false;
      if (!state_.raised.load(std::memory_order_relaxed)) return false;
    }
    // Only a session that can recover, or must re-throw, has anything to do here; saying so at
    // compile time lets the compiler see that the loop ends (clang otherwise reloads state).
    if constexpr (!recoverable && !Singular)
      return true;
    else
      return should_stop_slow();
  }

  // One step: every before_run, the backend's step with the merged feeds and fetches, every
  // after_run. Returns the caller's own fetched values when args has fetches. When a stop ends
  // the recovery from a lost backend, run() returns without running the step (every fetched
  // value empty) and the session is stopped, as after a hook's stop.
  template <class... Items>
  RUNHOOKS_DETAIL_HOT auto run(const SessionRunArgs<Items...>& args) {
    if constexpr (handles_exceptions) {
      try {
        return run_unguarded(args);
      } catch (...) {
        exception_escapes(std::current_exception());
        throw;
      }
    } else {
      // run_unguarded's body, written out: without a hook defining on_exception the per-step
      // path is the one it always was (the instruction counts compare it).
      if (stop_requested()) [[unlikely]]
        return run_after_stop(args);
      // The captures in the order the closure had before run_step moved to a base (see below).
      return with_recovery([&args, this]() RUNHOOKS_DETAIL_LAMBDA_HOT {
        return this->template run_step<false>(args);
      });
    }
  }
  RUNHOOKS_DETAIL_HOT void run() { run(empty_args_); }

  // Runs step_fn(step_context) once, re-running all of it after a recovery. step_context offers
  // session() (the backend, no hooks), run_with_hooks(...) and request_stop(). When a stop ends
  // that recovery, step_fn is not run again: a step_fn returning void returns, any other throws
  // StopIteration (a clean end for run_loop), since there is no result to return.
  template <class StepFn>
  decltype(auto) run_step_fn(StepFn&& step_fn) {
    static_assert(std::is_invocable_v<StepFn&, StepContext<BasicMonitoredSession>&>,
                  "runhooks: step_fn must take exactly one argument, the step context: write "
                  "`[&](auto& step_context) { ... }`.");
    if (state_.closed || state_.pending_error) [[unlikely]]
      refuse_run();
    if constexpr (std::is_invocable_v<StepFn&, StepContext<BasicMonitoredSession>&>) {
      if constexpr (handles_exceptions) {
        try {
          return with_recovery([&]() -> decltype(auto) {
            StepContext<BasicMonitoredSession> context(*this);
            return step_fn(context);
          });
        } catch (...) {
          exception_escapes(std::current_exception());
          throw;
        }
      } else {
        return with_recovery([&]() -> decltype(auto) {
          StepContext<BasicMonitoredSession> context(*this);
          return step_fn(context);
        });
      }
    }
  }

  // Ask to stop after this step, from the thread that runs the loop (TensorFlow users asked for
  // this in vain, tensorflow#14028). While that thread is blocked creating or re-creating the
  // backend (in the constructor, or a run() or should_stop() that recovers), another thread may
  // call it too: the retries end at once, a back-off included, and the session stops without a
  // backend. At other times, other threads stop the session with coordinator().request_stop(),
  // which is always safe (a stop during recovery included).
  void request_stop() noexcept {
    if constexpr (recoverable) {
      int expected = 1;
      if (state_.recovering.compare_exchange_strong(expected, 2, std::memory_order_seq_cst) ||
          expected == 2) {
        detail::wake_stop_waiters();
        return;
      }
    }
    state_.caller_stop = true;
    state_.set_stop();
    // The loop ends: a progress bar of this session ends its line now (log.hpp, the live line).
    if (slot_.alive()) detail::live_line_loop_ends(&slot_.get());
  }

  // The backend, bypassing hooks (TensorFlow's raw_session()). It stays valid after close(); after
  // a re-creation that failed, or a stop during recovery, there is none, and this throws
  // UsageError.
  backend_type& raw_session() {
    if (!slot_.alive()) [[unlikely]]
      throw UsageError("The session has no backend: re-creating it failed, or a stop ended its "
                       "recovery.");
    return slot_.get();
  }

  // The session's coordinator, made on first use. From here on the session also loads the
  // coordinator's atomic stop flag on every step, since another thread may now stop it. Call it
  // on the thread that runs the session, then hand the reference to other threads; it stays
  // valid for the session's life, across recoveries. Needs <runhooks/coordinator.hpp> (C is
  // always Coordinator).
  template <class C = Coordinator>
  C& coordinator() {
    C& coord = state_.coord.template get<C>();
    state_.poll_coordinator();
    return coord;
  }

  // How long close() and recovery wait for the coordinator's threads before joining them anyway
  // (TensorFlow's stop_grace_period_secs, 120 s by default). Finite, 0 to 1e9 s, or
  // std::invalid_argument.
  void set_stop_grace_period_secs(double secs) {
    state_.grace_secs = detail::checked_secs("stop_grace_period_secs", secs);
  }

  // The I-th hook (through std::ref if it was passed that way).
  template <std::size_t I>
  auto& hook() noexcept {
    return detail::unwrap(boost::hana::at_c<I>(hooks_));
  }

  // The hook of type Hook, when exactly one hook has that type.
  template <class Hook>
  Hook& hook() noexcept {
    static_assert((0 + ... + std::is_same_v<detail::unwrap_hook_t<Hooks>, Hook>) == 1,
                  "runhooks: session.hook<Hook>() needs exactly one hook of that type; reach it "
                  "by position with session.hook<I>() instead.");
    return hook<detail::index_of<Hook, detail::unwrap_hook_t<Hooks>...>>();
  }

  // Calls every end(), stops and joins the coordinator, and marks the session closed. Throws
  // the first error of: an end() that threw, an error a coordinator thread reported and run()
  // has not raised yet. A MonitoredSession (which recovers) logs an AbortedError or
  // UnavailableError that a thread reports at shutdown instead of throwing it, as TensorFlow's
  // recoverable close does; a SingularMonitoredSession throws it. Closing twice is an error.
  // (Rule 8 of session/recovery.hpp.)
  void close() {
    if (state_.closed) throw UsageError("Session is already closed.");
    close_internal(true);
  }

  bool closed() const noexcept { return state_.closed; }

 private:
  friend Recovery;
  friend Step;
  friend HookStates;
  template <class S>
  friend class StepContext;
  template <class S, class Body>
  friend void run_loop(S& session, Body&& body);

  using hooks_type = boost::hana::basic_tuple<Hooks...>;
  static constexpr bool singular = Singular;
  static constexpr std::size_t hook_count = sizeof...(Hooks);
  static constexpr std::size_t profiler_index =
      detail::index_of<std::true_type,
                       std::bool_constant<StepProfiler<detail::unwrap_hook_t<Hooks>>>...>;

  // Whether a stop was asked for. Where `attention` decides, `attention && stop` lets the
  // compiler skip the second load after should_stop() found attention clear.
  RUNHOOKS_DETAIL_HOT bool stop_requested() const noexcept {
    if constexpr (always_polls)
      return state_.stop;
    else
      return state_.attention && state_.stop;
  }

  template <class F>
  void for_each_hook(F&& f) {
    boost::hana::for_each(hooks_, [&](auto& stored) { f(detail::unwrap(stored)); });
  }

  // run() for a session with an on_exception hook, which catches around it.
  template <class CallerArgs>
  RUNHOOKS_DETAIL_HOT auto run_unguarded(const CallerArgs& args) {
    if (stop_requested()) [[unlikely]]
      return run_after_stop(args);
    return with_recovery([&args, this]() RUNHOOKS_DETAIL_LAMBDA_HOT {
      return this->template run_step<false>(args);
    });
  }

  // An exception is leaving run(), run_step_fn() or (singular) should_stop(): every on_exception,
  // while the backend exists (a recovery that gave up has none) and the session is open. What
  // the session recovered from never gets here; the clean ends are filtered out by the dispatch.
  void exception_escapes(const std::exception_ptr& error) noexcept {
    if (state_.closed || !slot_.alive()) return;
    detail::dispatch_on_exception(slot_.get(), error,
                                  [this](auto&& f) { this->for_each_hook(f); });
  }

  // run() once a stop was asked for: out of line, so that the per-step path tests the stop once.
  // The captures are listed, args first: with `this->` written first, [&] lays the closure out
  // the other way round, and clang then compiles this path differently.
  template <class CallerArgs>
  [[gnu::noinline]] auto run_after_stop(const CallerArgs& args) {
    refuse_unless_hooks_stopped();
    return with_recovery([&args, this] { return this->template run_step<true>(args); });
  }

  static constexpr SessionRunArgs<> empty_args_{};

  slot_type slot_;
  [[no_unique_address]] hooks_type hooks_;
  // Last, so that its coordinator is destroyed first: the coordinator's threads are joined
  // before the hooks and the backend they may use go away.
  detail::StopState state_;
};

// TensorFlow's MonitoredSession: recovers a backend made by a session creator.
template <class Source, class... Hooks>
class MonitoredSession : public BasicMonitoredSession<false, Source, Hooks...> {
 public:
  using BasicMonitoredSession<false, Source, Hooks...>::BasicMonitoredSession;
};

template <class Source, class... Hooks>
MonitoredSession(Source, Hooks...)
    -> MonitoredSession<detail::source_of_t<Source, RetryForever>, Hooks...>;

// TensorFlow's SingularMonitoredSession: never recovers; AbortedError and UnavailableError
// propagate, and should_stop() re-throws an error reported to the coordinator.
template <class Source, class... Hooks>
class SingularMonitoredSession : public BasicMonitoredSession<true, Source, Hooks...> {
 public:
  using BasicMonitoredSession<true, Source, Hooks...>::BasicMonitoredSession;
};

template <class Source, class... Hooks>
SingularMonitoredSession(Source, Hooks...)
    -> SingularMonitoredSession<detail::source_of_t<Source, NoRecovery>, Hooks...>;

}  // namespace runhooks
