// MonitoredSession: runs a backend's steps with hooks composed at compile time, under
// TensorFlow's SessionRunHook contract, and recovers a lost backend.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/at.hpp>
#include <boost/hana/unpack.hpp>

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/coordinator_slot.hpp>
#include <runhooks/detail/hook_checks.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/detail/type_name.hpp>
#include <runhooks/detail/type_list.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_creator.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>

// The per-step path (run(), should_stop() and what they call) is forced inline: it is a few
// instructions once the hooks' calls are inlined, but its rare paths (recovery, errors) make it
// look large to the inliner, and clang otherwise leaves run() as a call on every step.
#if defined(__GNUC__) || defined(__clang__)
#define RUNHOOKS_DETAIL_HOT [[gnu::always_inline]] inline
#define RUNHOOKS_DETAIL_LAMBDA_HOT __attribute__((always_inline))
#else
#define RUNHOOKS_DETAIL_HOT inline
#define RUNHOOKS_DETAIL_LAMBDA_HOT
#endif

namespace runhooks {

// A hook that can say, outside its per-step points, that the session should stop. While the
// session creates or re-creates its backend no after_run runs, so it asks such hooks directly,
// before every attempt and at every wake of the back-off: a stop ends the recovery (see
// BasicMonitoredSession::recover). Models: SignalStopHook (a signal arrived).
//   Minimal complete definition: `bool stop_requested()`, cheap and safe to call at any time
//   (it is never called on the per-step path), and `std::string stop_reason()` for the log line
//   ("SIGTERM received"). A source set by another thread or a signal handler is seen at once if
//   it also calls detail::wake_stop_waiters(), as SignalStopHook's handler does; otherwise at the
//   next attempt or the end of the back-off.
template <class Hook>
concept StopSource = requires(Hook& hook) {
  { hook.stop_requested() } -> std::convertible_to<bool>;
  { hook.stop_reason() } -> std::convertible_to<std::string>;
};

namespace detail {

// Where the backend lives: in the session itself, or, for a session creator, in an optional
// that recovery empties and refills.
template <class Source>
struct backend_slot {
  using backend_type = Source;
  static constexpr bool can_recreate = false;
  Source backend;
  explicit backend_slot(Source source) : backend(std::move(source)) {}
  Source& get() noexcept { return backend; }
  bool alive() const noexcept { return true; }
  void create() {}
};

template <SessionCreatorType Creator>
struct backend_slot<Creator> {
  using backend_type = typename Creator::backend_type;
  static constexpr bool can_recreate = true;
  Creator creator;
  std::optional<backend_type> backend;

  explicit backend_slot(Creator c) : creator(std::move(c)) {}
  backend_type& get() noexcept { return *backend; }
  bool alive() const noexcept { return backend.has_value(); }
  void destroy() noexcept { backend.reset(); }
  void create() {
    // Constructed in place from the creator's prvalue: backends need not be movable.
    struct from_creator {
      Creator& c;
      operator backend_type() { return c.create_session(); }
    };
    backend.emplace(from_creator{creator});
    if constexpr (requires { creator.initialize(*backend); }) {
      try {
        creator.initialize(*backend);  // restore a checkpoint, receive a chief's state, ...
      } catch (...) {
        backend.reset();
        throw;
      }
    }
  }
};

// should_stop() reads only `attention` on the per-step path, a plain flag set when a stop was
// asked for (by a hook, the caller, close(), a recovery without a backend), while an
// error waits to be raised, and for as long as someone may stop the coordinator from another
// thread (a hook whose after_create_session takes `Coordinator&`, or a caller of coordinator()).
// Only then does it also load `raised`, an atomic flag that the coordinator raises when it is
// stopped and that every local stop raises too: a session nobody can stop from another thread
// has no atomic load on its per-step path, and one that can has the one a hand-written loop
// would have.
struct StopState {
  bool attention = false;  // stop || polls_coordinator
  // Set by a hook's stop request, by the caller's, on close, while recovery has no backend, and
  // while an error waits to be raised.
  bool stop = false;
  bool caller_stop = false;  // survives recovery, which clears only the hooks' requests
  bool polls_coordinator = false;
  bool closed = false;
  int uncaught;  // std::uncaught_exceptions() at construction, to tell a clean scope exit
  double grace_secs = 120.0;          // TensorFlow's stop_grace_period_secs
  std::exception_ptr pending_error;   // a coordinator thread's error that run() has not raised
  std::exception_ptr raised_error;    // the one run() raised, so close() does not raise it twice
  std::atomic<bool> raised{false};    // stop, or the coordinator was stopped
  CoordinatorSlot coord{&raised};     // made on demand; raises `raised` when stopped
  // While the loop's thread creates or re-creates the backend, it is blocked inside the session,
  // and a request_stop() comes from another thread: that one must not write the plain flags
  // above. 0: not recovering; 1: recovering; 2: recovering, and request_stop() was called.
  std::atomic<int> recovering{0};

  // Out of line: the compiler then does not carry `attention`'s first value into the loop in a
  // register, and the per-step test stays one compare of memory (clang).
  [[gnu::noinline]] StopState() noexcept : uncaught(std::uncaught_exceptions()) {}
  StopState(const StopState&) = delete;
  StopState& operator=(const StopState&) = delete;

  void set_stop() noexcept {
    stop = attention = true;
    raised.store(true, std::memory_order_relaxed);
  }
  // After a re-creation that succeeded: only the caller's stop survives. The new generation's
  // threads may have stopped the coordinator already: lower the flag first, then look, with the
  // coordinator's own two stores seq_cst too, so that their raise is never lost.
  void clear_stop() noexcept {
    stop = caller_stop;
    attention = stop || polls_coordinator;
    raised.store(stop, std::memory_order_seq_cst);
    if (coord.exists() && coord.stop_requested()) raised.store(true, std::memory_order_relaxed);
  }
  void poll_coordinator() noexcept { polls_coordinator = attention = true; }
};

// Marks the loop's thread as creating or re-creating the backend (state.recovering), so that a
// request_stop() from another thread only flips the atomic. The outermost scope, on leaving,
// turns such a request into the caller's stop, on the loop's thread.
class RecoveringScope {
 public:
  explicit RecoveringScope(StopState& state) noexcept : state_(state) {
    int expected = 0;
    outermost_ = state.recovering.compare_exchange_strong(expected, 1, std::memory_order_seq_cst);
  }
  RecoveringScope(const RecoveringScope&) = delete;
  RecoveringScope& operator=(const RecoveringScope&) = delete;
  ~RecoveringScope() {
    if (outermost_ && state_.recovering.exchange(0, std::memory_order_seq_cst) == 2) {
      state_.caller_stop = true;
      state_.set_stop();
    }
  }

 private:
  StopState& state_;
  bool outermost_;
};

// What a run() whose recovery a stop ended returns: its step did not run, so no value.
template <class T>
inline constexpr bool is_run_values = false;
template <class Args>
inline constexpr bool is_run_values<SessionRunValues<Args>> = true;

// Named calls keep the backend's feed() and fetch() dependent, so a backend without them
// compiles as long as no one feeds or fetches. A key the backend lacks is reported once, by
// check_backend_keys; the calls then compile to nothing instead of a second error.
template <class B, class K, class V>
void feed_backend(B& backend, K key, const V& value) {
  if constexpr (CanFeed<B, K>) backend.feed(key, value);
}
template <class K, class B>
decltype(auto) fetch_backend(B& backend) {
  if constexpr (CanFetch<B, K>)
    return backend.fetch(K{});
  else
    return after_diagnostic<typename K::value_type>();
}

[[noreturn]] inline void throw_run_after_stop(bool closed) {
  if (closed) throw UsageError("Run called on a closed session.");
  throw UsageError("Run called even after should_stop requested.");
}

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

inline std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace detail

template <class Session>
class StepContext;

// The session. Source is a backend, or a SessionCreator (any callable returning a backend is
// turned into one). Hooks are any types defining some of the five hook points (see
// concepts.hpp); they are called in declaration order at every point, and a point a hook does
// not define costs nothing. Singular sessions never recover; use SingularMonitoredSession.
//
// Per step, run() costs: the stop check, each defined before_run, the feeds, backend.run(),
// the enabled fetches, each defined after_run, and one test of the run's stop request.
template <bool Singular, class Source, class... Hooks>
class BasicMonitoredSession {
  using slot_type = detail::backend_slot<Source>;

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

  // TensorFlow's construction order: every begin(), then the backend, then every
  // after_create_session(). A recoverable session retries a creation that fails with a
  // preemption error as its policy allows; a stop during those retries (see request_stop())
  // ends them, and the constructor returns a stopped session without a backend.
  explicit BasicMonitoredSession(Source source, Hooks... hooks)
      : slot_(std::move(source)), hooks_{std::move(hooks)...} {
    for_each_hook([](auto& hook) {
      if constexpr (HasBegin<std::remove_cvref_t<decltype(hook)>>) hook.begin();
    });
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
  }

  // True after close(), after a hook or the caller requested a stop, or once the coordinator
  // stopped. One load of a plain flag on the per-step path, plus the coordinator's atomic flag
  // while someone holds the coordinator (see StopState). A coordinator that stopped with an
  // AbortedError or UnavailableError makes a recoverable session re-create its backend here
  // and return false (TensorFlow does the same).
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
    if (stop_requested()) [[unlikely]]
      return run_after_stop(args);
    return with_recovery([&]() RUNHOOKS_DETAIL_LAMBDA_HOT { return run_step<false>(args); });
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
    if constexpr (std::is_invocable_v<StepFn&, StepContext<BasicMonitoredSession>&>)
      return with_recovery([&]() -> decltype(auto) {
        StepContext<BasicMonitoredSession> context(*this);
        return step_fn(context);
      });
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
  void close() {
    if (state_.closed) throw UsageError("Session is already closed.");
    close_internal(true);
  }

  bool closed() const noexcept { return state_.closed; }

 private:
  template <class S>
  friend class StepContext;
  template <class S, class Body>
  friend void run_loop(S& session, Body&& body);

  // Closes where an error cannot be thrown: in the destructor, and in run_loop when its body
  // threw anything but a clean end (then without end(), as TensorFlow's __exit__ does, keeping
  // the body's exception). Errors while closing are logged.
  void close_logging_errors(bool call_end, const char* where) noexcept {
    if (state_.closed) return;
    try {
      close_internal(call_end);
    } catch (const std::exception& e) {
      log(Severity::warning,
          std::string("runhooks: error while closing a session ") + where + ": " + e.what());
    } catch (...) {
      log(Severity::warning, std::string("runhooks: unknown error while closing a session ") + where);
    }
  }

  // Whether a stop was asked for. Where `attention` decides, `attention && stop` lets the
  // compiler skip the second load after should_stop() found attention clear.
  RUNHOOKS_DETAIL_HOT bool stop_requested() const noexcept {
    if constexpr (always_polls)
      return state_.stop;
    else
      return state_.attention && state_.stop;
  }

  // Out of line, so that the per-step test of `attention` stays one compare of memory: inlined,
  // clang carries the flag's new value into the loop's head in a register.
  [[gnu::noinline]] void stop_after_run() noexcept { state_.set_stop(); }

  // The refusals before the hooked run: a closed session, a thread's error waiting, the caller's
  // stop, no backend. A stop that only the hooks asked for is refused inside the hooked run
  // (run_step), as TensorFlow's _HookedSession does, where a preemption that a coordinator
  // thread reported takes the refusal's place and the session recovers.
  [[gnu::noinline]] void refuse_unless_hooks_stopped() {
    if (state_.closed || state_.pending_error || state_.caller_stop || !slot_.alive())
      refuse_run();
  }

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
  [[gnu::noinline, gnu::cold]] void creation_failed(const std::exception_ptr& error) {
    end_generation();
    if constexpr (recoverable) {
      if (detail::is_preemption(error)) {
        int failures = 1;
        if (const std::exception_ptr end = recover(failures, error)) throw_for(end);
        return;
      }
    }
    throw_for(error);
  }

  // run() once a stop was asked for: out of line, so that the per-step path tests the stop once.
  template <class CallerArgs>
  [[gnu::noinline]] auto run_after_stop(const CallerArgs& args) {
    refuse_unless_hooks_stopped();
    return with_recovery([&] { return run_step<true>(args); });
  }

  // run() after a stop: raises the error a coordinator thread reported, if one waits, else
  // TensorFlow's "Run called even after should_stop requested".
  [[noreturn, gnu::noinline]] void refuse_run() {
    if (state_.pending_error) {
      state_.raised_error = std::exchange(state_.pending_error, nullptr);
      std::rethrow_exception(state_.raised_error);
    }
    detail::throw_run_after_stop(state_.closed);
  }

  // Keeps an error a coordinator thread reported until run() or close() can raise it; the session
  // stops meanwhile (TensorFlow raises it from the run that triggered the recovery, or close()).
  void keep_error(std::exception_ptr error) noexcept {
    if (!state_.pending_error) state_.pending_error = std::move(error);
    state_.set_stop();
  }

  // Rethrows `error`, or the coordinator thread's error that ending the generation found instead
  // (TensorFlow's _CoordinatedSession: what a thread reported wins).
  [[noreturn]] void throw_for(const std::exception_ptr& error) {
    if (state_.pending_error) refuse_run();
    std::rethrow_exception(error);
  }

  template <class F>
  void for_each_hook(F&& f) {
    boost::hana::for_each(hooks_, [&](auto& stored) { f(detail::unwrap(stored)); });
  }

  void after_create_session() {
    for_each_hook([&](auto& hook) {
      using Hook = std::remove_cvref_t<decltype(hook)>;
      if constexpr (TakesCoordinator<Hook, backend_type> || ReadsCoordinator<Hook, backend_type>)
        call_after_create_session(hook, slot_.get(), state_.coord.get());
      else if constexpr (HasAfterCreateSession<Hook, backend_type>)
        hook.after_create_session(slot_.get());
    });
  }

  // Calls one hook's before_run; hooks without one (or returning void) add nothing.
  template <class Hook, class Ctx>
  static auto call_before_run(Hook& hook, Ctx& ctx) {
    static_assert(detail::check_before_run<Hook, Ctx>::value);
    if constexpr (HasBeforeRun<Hook, Ctx>) {
      using Result = decltype(hook.before_run(ctx));
      static_assert(detail::check_before_run_result<Hook, Ctx, Result>::value);
      if constexpr (std::is_void_v<Result>) {
        hook.before_run(ctx);
        return SessionRunArgs<>{};
      } else {
        return hook.before_run(ctx);
      }
    } else {
      return SessionRunArgs<>{};
    }
  }

  template <class Args>
  void feed(const Args& args) {
    args.for_each([&](const auto& item) {
      using Item = std::remove_cvref_t<decltype(item)>;
      if constexpr (detail::is_feed<Item>)
        detail::feed_backend(slot_.get(), typename Item::key_type{}, item.value);
    });
  }

  // Reads every fetched key from the backend once per step, however many requests name it:
  // the caller's request comes first, then the hooks' in order, and a request whose key an
  // earlier request already read this step gets a copy. A request receives a value only where
  // its own fetch is switched on.
  template <class Sources, class Sinks, std::size_t... S>
  void fetch_once(const Sources& sources, const Sinks& sinks, std::index_sequence<S...>) {
    (fetch_into<S>(sources, sinks), ...);
  }

  template <std::size_t S, class Sources, class Sinks>
  void fetch_into(const Sources& sources, const Sinks& sinks) {
    boost::hana::at_c<S>(sources)->for_each([&](const auto& item) {
      using Item = std::remove_cvref_t<decltype(item)>;
      if constexpr (detail::is_fetch<Item>) {
        using K = typename Item::key_type;
        if (!item.enabled) return;
        auto& slot = boost::hana::at_c<S>(sinks)->template slot<K>();
        const auto* earlier = earlier_fetch<K>(sources, sinks, std::make_index_sequence<S>{});
        if (earlier != nullptr)
          slot = *earlier;
        else
          slot.emplace(detail::fetch_backend<K>(slot_.get()));
      }
    });
  }

  template <class K, class Sources, class Sinks, std::size_t... J>
  static const std::optional<typename K::value_type>* earlier_fetch(
      const Sources& sources, const Sinks& sinks, std::index_sequence<J...>) {
    const std::optional<typename K::value_type>* found = nullptr;
    (
        [&] {
          using Args = std::remove_cvref_t<decltype(*boost::hana::at_c<J>(sources))>;
          if constexpr (Args::template has<Fetch<K>>) {
            if (found == nullptr && boost::hana::at_c<J>(sources)->template get<Fetch<K>>().enabled)
              found = &boost::hana::at_c<J>(sinks)->template slot<K>();
          }
        }(),
        ...);
    return found;
  }

  static constexpr std::size_t profiler_index =
      detail::index_of<std::true_type,
                       std::bool_constant<StepProfiler<detail::unwrap_hook_t<Hooks>>>...>;

  // One hooked step: TensorFlow's _CoordinatedSession.run around _HookedSession.run. Refused
  // after a stop; timed span by span when a profiling hook asks for it; and an error that is not
  // a preemption gives way to a preemption a coordinator thread reported, so that the session
  // recovers from what really happened (TensorFlow G71), a SingularMonitoredSession included.
  // CheckStop: the caller found a stop asked for (only by the hooks, or it would have refused).
  template <bool CheckStop, class CallerArgs>
  RUNHOOKS_DETAIL_HOT auto run_step(const CallerArgs& args) {
    try {
      if constexpr (CheckStop) {
        if (stop_requested()) refuse_run();
      }
      if constexpr (profiler_index != detail::npos) {
        if (hook<profiler_index>().profile_this_step()) [[unlikely]]
          return run_hooked<true>(args);
      }
      return run_hooked<false>(args);
    } catch (...) {
      raise_thread_preemption();
      throw;
    }
  }

  // In a handler: throws the preemption a coordinator thread reported, if there is one and the
  // error being handled is not a preemption itself.
  [[gnu::noinline]] void raise_thread_preemption() {
    // Without a backend (closed, or a recovery that gave up) the coordinator's error belongs to
    // a generation that has ended.
    if (state_.closed || !slot_.alive() || !state_.coord.exists()) return;
    const std::exception_ptr thread_error = state_.coord.error();
    if (detail::is_preemption(thread_error) &&
        !detail::is_preemption(std::current_exception()))
      std::rethrow_exception(thread_error);
  }

  static double steady_secs() noexcept {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // f(), and, in a profiled step, its span reported to the profiling hook.
  template <bool Profiled, class F>
  decltype(auto) timed([[maybe_unused]] std::string_view who,
                       [[maybe_unused]] std::string_view what, F&& f) {
    if constexpr (!Profiled) {
      return f();
    } else {
      const double begin = steady_secs();
      if constexpr (std::is_void_v<decltype(f())>) {
        f();
        hook<profiler_index>().record_span(who, what, begin, steady_secs());
      } else {
        decltype(auto) result = f();
        hook<profiler_index>().record_span(who, what, begin, steady_secs());
        return result;
      }
    }
  }

  template <bool Profiled, class Ctx, class Stored>
  auto before_run_of(Stored& stored, Ctx& ctx) {
    using Hook = std::remove_cvref_t<decltype(detail::unwrap(stored))>;
    if constexpr (Profiled && HasBeforeRun<Hook, Ctx>)
      return timed<true>(detail::type_name<Hook>(), "before_run",
                         [&] { return call_before_run(detail::unwrap(stored), ctx); });
    else
      return call_before_run(detail::unwrap(stored), ctx);
  }

  template <bool Profiled, class CallerArgs>
  RUNHOOKS_DETAIL_HOT auto run_hooked(const CallerArgs& args) {
    using Ctx = SessionRunContext<backend_type, CallerArgs>;
    Ctx ctx(args, slot_.get());
    // Braced initialization runs the before_run calls left to right, in declaration order.
    auto requests = boost::hana::unpack(hooks_, [&](auto&... stored) {
      return boost::hana::basic_tuple<decltype(before_run_of<Profiled>(stored, ctx))...>{
          before_run_of<Profiled>(stored, ctx)...};
    });
    check_merged_shape<CallerArgs, decltype(requests)>(
        std::make_index_sequence<sizeof...(Hooks)>{});

    boost::hana::for_each(requests, [&](const auto& request) { feed(request); });
    feed(args);
    timed<Profiled>(detail::type_name<backend_type>(), "run", [&] { slot_.get().run(); });
    ctx.step_ran();

    // Every fetch reads the state the step left, before any after_run can change it.
    // Keyed by the caller's fetches only: run() returns one type whatever it feeds.
    SessionRunValues<detail::fetches_of_t<CallerArgs>> caller_values;
    auto values = boost::hana::unpack(requests, [](const auto&... request) {
      return boost::hana::basic_tuple<SessionRunValues<std::remove_cvref_t<decltype(request)>>...>{};
    });
    timed<Profiled>(detail::type_name<backend_type>(), "fetch", [&] {
    fetch_once(boost::hana::unpack(requests,
                                   [&](const auto&... request) {
                                     return boost::hana::basic_tuple<
                                         const CallerArgs*,
                                         const std::remove_cvref_t<decltype(request)>*...>{
                                         &args, &request...};
                                   }),
               boost::hana::unpack(values,
                                   [&](auto&... hook_values) {
                                     return boost::hana::basic_tuple<
                                         SessionRunValues<detail::fetches_of_t<CallerArgs>>*,
                                         std::remove_cvref_t<decltype(hook_values)>*...>{
                                         &caller_values, &hook_values...};
                                   }),
               std::make_index_sequence<sizeof...(Hooks) + 1>{});
    });
    call_after_run<Profiled>(ctx, values, std::make_index_sequence<sizeof...(Hooks)>{});
    if (ctx.stop_requested()) [[unlikely]]
      stop_after_run();

    if constexpr (has_fetch<CallerArgs>)
      return caller_values;
    else
      return;
  }

  template <bool Profiled, class Ctx, class Values, std::size_t... I>
  void call_after_run(Ctx& ctx, Values& values, std::index_sequence<I...>) {
    (
        [&] {
          auto& hook = detail::unwrap(boost::hana::at_c<I>(hooks_));
          using Hook = std::remove_cvref_t<decltype(hook)>;
          using HookValues = std::remove_cvref_t<decltype(boost::hana::at_c<I>(values))>;
          if constexpr (Profiled && HasAfterRun<Hook, Ctx, HookValues>)
            timed<true>(detail::type_name<Hook>(), "after_run", [&] {
              call_after_run_one(hook, ctx, boost::hana::at_c<I>(values));
            });
          else
            call_after_run_one(hook, ctx, boost::hana::at_c<I>(values));
        }(),
        ...);
  }

  template <class Hook, class Ctx, class HookValues>
  static void call_after_run_one(Hook& hook, Ctx& ctx, const HookValues& values) {
    static_assert(detail::check_after_run<Hook, Ctx, HookValues>::value);
    if constexpr (HasAfterRun<Hook, Ctx, HookValues>) hook.after_run(ctx, values);
  }

  template <class Args>
  static constexpr bool has_fetch = [] {
    bool any = false;
    Args::for_each_item_type([&]<class Item>() { any = any || detail::is_fetch<Item>; });
    return any;
  }();

  // The merged shape of one step, checked once per caller-args type at compile time: every key
  // is one the backend offers, and no input is fed twice.
  template <class CallerArgs, class Requests, std::size_t... I>
  static constexpr void check_merged_shape(std::index_sequence<I...>) {
    using R = std::remove_cvref_t<Requests>;
    detail::check_backend_keys<backend_type, CallerArgs>();
    (detail::check_backend_keys<backend_type, request_t<R, I>>(), ...);
    (check_pairs_from<I, R>(std::index_sequence<I...>{}), ...);
    (detail::check_caller_feeds<hook_t<I>, request_t<R, I>, CallerArgs>(), ...);
  }
  template <std::size_t A, class R, std::size_t... B>
  static constexpr void check_pairs_from(std::index_sequence<B...>) {
    (
        [] {
          if constexpr (A < B)
            detail::check_hook_feeds<hook_t<A>, request_t<R, A>, hook_t<B>, request_t<R, B>>();
        }(),
        ...);
  }
  template <class R, std::size_t I>
  using request_t =
      std::remove_cvref_t<decltype(boost::hana::at_c<I>(std::declval<R&>()))>;
  template <std::size_t I>
  using hook_t = detail::unwrap_hook_t<
      std::remove_cvref_t<decltype(boost::hana::at_c<I>(std::declval<boost::hana::basic_tuple<Hooks...>&>()))>>;

  // Runs f; on a preemption error (from the backend, a hook, or reported to the coordinator)
  // re-creates the backend and runs f again, as the retry policy allows.
  template <class F>
  RUNHOOKS_DETAIL_HOT decltype(auto) with_recovery(F&& f) {
    if constexpr (!recoverable) {
      return f();
    } else {
      for (int failures = 1;; ++failures) {
        try {
          return f();
        } catch (...) {
          const std::exception_ptr error = std::current_exception();
          if (state_.closed || !detail::is_preemption(error)) throw;
          if (const std::exception_ptr end = recover(failures, error)) throw_for(end);
        }
        if (!slot_.alive()) [[unlikely]]  // a stop ended the recovery
          return stopped_result<decltype(f())>();
      }
    }
  }

  // The backend (made by the creator, if there is one), a fresh coordinator, and every hook's
  // after_create_session(): TensorFlow's _CoordinatedSessionCreator.create_session.
  void create_session() {
    slot_.create();
    start_generation();
  }
  void start_generation() {
    state_.coord.reset();
    after_create_session();
  }

  // Ends the current backend's generation, whichever hook or step failed: stops the
  // coordinator and joins every thread started on it (waiting up to the grace period, then
  // joining anyway) before the backend they may use is destroyed. An error one of them reported
  // that is not a preemption is kept, to be raised by run() or close().
  void end_generation() noexcept {
    const std::exception_ptr error = state_.coord.stop_and_join(state_.grace_secs);
    if (error && !detail::is_preemption(error) && error != state_.raised_error) keep_error(error);
    if constexpr (recoverable) slot_.destroy();
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
    detail::RecoveringScope recovering(state_);
    end_generation();
    // Until a new backend is ready the session should stop and run() must not reach the
    // backend (TensorFlow: should_stop() is true while _sess is None).
    state_.set_stop();
    try {
      std::exception_ptr end = retry(failures, std::move(failure));
      if (!slot_.alive()) state_.set_stop();  // raises again the flag retry() listened on
      return end;
    } catch (...) {  // a policy's invalid delay
      state_.set_stop();
      throw;
    }
  }

  // recover()'s attempts. Leaves `raised` lowered unless it re-created the backend.
  std::exception_ptr retry(int& failures, std::exception_ptr failure) {
    for (;; ++failures) {
      if (state_.pending_error) return failure;
      // The lost generation's threads are joined: from here on, the coordinator's stop (which
      // raises this flag) is someone's request to stop.
      state_.raised.store(false, std::memory_order_seq_cst);
      if (stop_arrived()) return stopped_during_recovery(failures, failure);
      const std::optional<double> delay = slot_.creator.policy().next_delay(failures);
      if (!delay) return failure;
      const double secs = detail::checked_secs("the retry policy's next_delay()", *delay);
      log(Severity::info, "runhooks: backend lost; re-creating it (attempt " +
                              std::to_string(failures) + ", after " + detail::format_number(secs) +
                              " s): " + detail::describe(failure));
      if (detail::wait_unless_stopped(secs, [this] { return stop_arrived(); }))
        return stopped_during_recovery(failures, failure);
      try {
        slot_.create();
        if (stop_arrived()) {
          slot_.destroy();  // no hook has seen it
          return stopped_during_recovery(failures, failure);
        }
        start_generation();
        state_.clear_stop();
        return nullptr;
      } catch (...) {
        failure = std::current_exception();
        end_generation();
        if (!detail::is_preemption(failure)) return failure;
      }
    }
  }

  // Whether a stop was asked for while the loop's thread creates or re-creates the backend,
  // where no after_run runs: by request_stop() from another thread, by stopping the coordinator
  // (which raises `raised`; retry() lowers it first), or by a hook that models StopSource.
  bool stop_arrived() {
    if (state_.recovering.load(std::memory_order_seq_cst) == 2 ||
        state_.raised.load(std::memory_order_seq_cst))
      return true;
    bool any = false;
    for_each_hook([&](auto& hook) {
      if constexpr (StopSource<std::remove_cvref_t<decltype(hook)>>)
        any = any || static_cast<bool>(hook.stop_requested());
    });
    return any;
  }

  [[gnu::noinline, gnu::cold]] std::exception_ptr stopped_during_recovery(
      int failures, const std::exception_ptr& failure) {
    std::string why;
    if (state_.recovering.load(std::memory_order_seq_cst) == 2)
      why = "request_stop() was called";
    else if (state_.raised.load(std::memory_order_seq_cst))
      why = "the coordinator was stopped";
    for_each_hook([&](auto& hook) {
      if constexpr (StopSource<std::remove_cvref_t<decltype(hook)>>)
        if (why.empty() && hook.stop_requested()) why = hook.stop_reason();
    });
    log(Severity::warning,
        "runhooks: stopped during recovery (" + why + "): the backend is not created again after " +
            (failures == 1 ? std::string("1 failure") :
                             std::to_string(failures) + " consecutive failures") +
            ", and the session stops without one. Last error: " + detail::describe(failure));
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

  [[gnu::noinline]] bool should_stop_slow() {
    if (state_.closed || state_.pending_error) return true;
    // TensorFlow reads the coordinator's error before the hooks' stop flag: a preemption
    // re-creates the backend (which resets that flag) even after a hook asked to stop.
    const std::exception_ptr error = state_.coord.error();
    if constexpr (recoverable) {
      if (slot_.alive() && detail::is_preemption(error)) {
        // TensorFlow's should_stop() never raises in a MonitoredSession: an error that ends
        // the recovery means "stop", and is logged rather than lost; a thread's error waits for
        // run() or close().
        try {
          int failures = 1;
          const std::exception_ptr end = recover(failures, error);
          if (end && !detail::is_preemption(end))  // a fatal error while re-creating
            log(Severity::warning,
                "runhooks: re-creating the backend failed: " + detail::describe(end));
          return state_.stop;  // the policy gave up, an error waits, or the caller asked to stop
        } catch (const std::exception& e) {
          log(Severity::warning, std::string("runhooks: re-creating the backend failed: ") +
                                     e.what());
          return true;
        }
      }
    }
    if constexpr (Singular) {
      if (error) std::rethrow_exception(error);
    }
    return true;
  }

  void close_internal(bool call_end) {
    state_.closed = true;
    state_.set_stop();
    std::exception_ptr first_error;
    if (call_end && slot_.alive()) {
      try {
        for_each_hook([&](auto& hook) {
          if constexpr (HasEnd<std::remove_cvref_t<decltype(hook)>, backend_type>)
            hook.end(slot_.get());
        });
      } catch (...) {
        first_error = std::current_exception();
      }
    }
    std::exception_ptr thread_error = state_.coord.stop_and_join(state_.grace_secs);
    if (recoverable && detail::is_preemption(thread_error)) {
      // TensorFlow's _WrappedSession.close logs preemption errors at shutdown: there is no
      // step left to recover.
      log(Severity::warning, "runhooks: ignoring an error reported to the coordinator while "
                             "closing (nothing left to recover): " +
                                 detail::describe(thread_error));
      thread_error = nullptr;
    }
    if (thread_error && thread_error == state_.raised_error) thread_error = nullptr;
    for (const std::exception_ptr& error : {first_error, state_.pending_error, thread_error}) {
      if (error) {
        state_.pending_error = nullptr;
        std::rethrow_exception(error);
      }
    }
  }

  static constexpr SessionRunArgs<> empty_args_{};

  slot_type slot_;
  [[no_unique_address]] boost::hana::basic_tuple<Hooks...> hooks_;
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

// What step_fn sees in run_step_fn (TensorFlow's StepContext).
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

  // TensorFlow raises StopIteration here, and so do we: run_loop() treats it as a clean end. The session's own request_stop() sets a flag instead.
  [[noreturn]] void request_stop() const {
    throw StopIteration("step_fn has requested the iterations to stop.");
  }

 private:
  Session* session_;
};

// TensorFlow's `with MonitoredSession(...) as s: while not s.should_stop(): body()`.
// Runs body until the session should stop; OutOfRangeError or StopIteration ends the loop
// cleanly. Then closes the session, calling every end(). Any other exception closes the session
// without end() and propagates.
template <class Session, class Body>
void run_loop(Session& session, Body&& body) {
  try {
    while (!session.should_stop()) body();
  } catch (const OutOfRangeError&) {
  } catch (const StopIteration&) {
  } catch (...) {
    session.close_logging_errors(false, "after an exception");
    throw;
  }
  session.close();
}

template <class Session>
void run_loop(Session& session) {
  run_loop(session, [&] { session.run(); });
}

}  // namespace runhooks
