// The concepts behind MonitoredSession: what a backend offers and what each hook point looks
// like. Every hook point is optional; a member named like one whose signature does not fit is
// a compile error, never a silently skipped callback.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <runhooks/session_run_args.hpp>

namespace runhooks {

class Coordinator;  // <runhooks/coordinator.hpp>; hooks that take it include that header

// A backend runs one training step per run().
//   Minimal complete definition: `void run()`.
//   Optional: `std::int64_t global_step() const` (needed by the step-based hooks),
//             `T fetch(K) const` for each key K it can produce,
//             `void feed(K, T)` for each key K it accepts.
template <class B>
concept Backend = std::is_object_v<B> && requires(B& b) { b.run(); };

template <class B>
concept HasGlobalStep = requires(const B& b) {
  { b.global_step() } -> std::convertible_to<std::int64_t>;
};

template <class B, class K>
concept CanFetch = requires(B& b) {
  { b.fetch(K{}) } -> std::convertible_to<typename K::value_type>;
};

template <class B, class K>
concept CanFeed = requires(B& b, typename K::value_type v) { b.feed(K{}, std::move(v)); };

// A session creator makes a fresh backend each time it is called: at start and on recovery.
template <class F>
concept BackendFactory = std::is_object_v<F> && !Backend<F> && std::invocable<F&> &&
                         Backend<std::remove_cvref_t<std::invoke_result_t<F&>>>;

// The five hook points, after TensorFlow's SessionRunHook, and a sixth of runhooks' own. Each is
// a concept on the hook type.
//   begin()                              once, before the backend exists
//   after_create_session(backend[, coord]) after each (re)creation of the backend
//   before_run(run_context)              before each step; returns void or SessionRunArgs<...>
//   after_run(run_context, run_values)   after each step that completed
//   end(backend)                         on close() and on a clean end of the loop
//   on_exception(backend, error)         when an exception is about to leave run() (HasOnException)
// and one query: produced(K), the value of a key the hook produces (ProducesKey).
template <class H>
concept HasBegin = requires(H& h) { h.begin(); };

// after_create_session(session, coord) in two forms. `const Coordinator&` (or `auto&`, which
// deduces const) only reads the coordinator: its stop_token() and should_stop(). `Coordinator&`
// may also stop it or start threads on it, which is why the session then polls its stop flag on
// every step; a coordinator nobody can stop needs no poll.
template <class H, class B>
concept ReadsCoordinator = requires(H& h, B& b, const Coordinator& c) {
  h.after_create_session(b, c);
};
template <class H, class B>
concept TakesCoordinator =
    !ReadsCoordinator<H, B> && requires(H& h, B& b, Coordinator& c) {
      h.after_create_session(b, c);
    };

template <class H, class B>
concept HasAfterCreateSession = ReadsCoordinator<H, B> || TakesCoordinator<H, B> ||
                                requires(H& h, B& b) { h.after_create_session(b); };

// Calls a hook's after_create_session with or without the coordinator, as the hook takes it;
// for driving hooks by hand, as TensorFlow's tests do.
template <class H, class B, class C = Coordinator>
  requires HasAfterCreateSession<H, B>
void call_after_create_session(H& hook, B& session, C& coord) {
  if constexpr (ReadsCoordinator<H, B>)
    hook.after_create_session(session, static_cast<const C&>(coord));
  else if constexpr (TakesCoordinator<H, B>)
    hook.after_create_session(session, coord);
  else
    hook.after_create_session(session);
}

namespace detail {
template <class T>
inline constexpr bool is_session_run_args = false;
template <class... Items>
inline constexpr bool is_session_run_args<SessionRunArgs<Items...>> = true;

template <class R>
concept before_run_result = std::is_void_v<R> || is_session_run_args<std::remove_cvref_t<R>>;

template <class H, class Ctx>
concept callable_before_run = requires(H& h, Ctx& ctx) { h.before_run(ctx); };
}  // namespace detail

// A before_run returning anything else does not fit: it is diagnosed, never called.
template <class H, class Ctx>
concept HasBeforeRun = detail::callable_before_run<H, Ctx> && requires(H& h, Ctx& ctx) {
  { h.before_run(ctx) } -> detail::before_run_result;
};

template <class H, class Ctx, class Values>
concept HasAfterRun = requires(H& h, Ctx& ctx, const Values& values) {
  h.after_run(ctx, values);
};

template <class H, class B>
concept HasEnd = requires(H& h, B& b) { h.end(b); };

// on_exception(backend, error): an exception is about to leave run() or run_step_fn() (or a
// SingularMonitoredSession's should_stop()) while the backend exists: Lightning's on_exception,
// which TensorFlow's hooks lack (an exception leaves without end()). Not called for what the
// session recovers from (AbortedError, UnavailableError), for the clean ends (OutOfRangeError,
// StopIteration), nor when there is no backend (its creation failed, or a recovery gave up).
// Every hook that defines it is called, in declaration order; one that throws is logged and the
// next is called; then the original exception propagates unchanged. Sessions whose hooks do not
// define it compile exactly as before (monitored_session.hpp). Models: ExceptionCheckpointHook
// (<runhooks/checkpoint/saver/exception_checkpoint_hook.hpp>).
template <class H, class B>
concept HasOnException = requires(H& h, B& b, const std::exception_ptr& error) {
  h.on_exception(b, error);
};

// A hook that produces key K: EvaluationHook, for the metrics of its evaluations. Not a hook
// point but a query the merged step makes (session/step.hpp).
//   Minimal complete definition: `const std::optional<typename K::value_type>& produced(K) const`,
//   the value produced in this step's after_run, or nothing on a step that produced none.
//   Semantics: a Fetch<K> requested by a hook declared after the producer is filled from
//   produced(K) right before that hook's after_run (so it sees this step's value), instead of
//   from the backend; with several producers of K, from the last one declared before it. On a
//   step on which the producer produced nothing the slot is empty though the fetch was enabled:
//   a consumer treats an absent value as "no check this step". The session checks at compile
//   time that every key a hook fetches is the backend's or produced by a hook before it (else
//   an error naming the key and the hook). A session without producers compiles to the same step.
template <class H, class K>
concept ProducesKey = requires(const H& h) {
  { h.produced(K{}) } -> std::same_as<const std::optional<typename K::value_type>&>;
};

// A hook that times the others (ProfilerHook). Before each step the session asks it whether to
// time this step; only then does it read the steady clock around every hook callback, the
// backend's step and its fetches, and report each as a span in seconds. A silent step costs
// the one call to profile_this_step(). At most one per session.
template <class H>
concept StepProfiler =
    requires(H& h, std::string_view who, std::string_view what, double secs) {
      { h.profile_this_step() } -> std::convertible_to<bool>;
      h.record_span(who, what, secs, secs);
    };

// A hook that can say, outside its per-step points, that the session should stop. While the
// session creates or re-creates its backend no after_run runs, so it asks such hooks directly,
// before every attempt and at every wake of the back-off: a stop ends the recovery (rule 4 of
// session/recovery.hpp). Models: SignalStopHook (a signal arrived).
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

// Does H have a member with this name, whatever its signature? Found by ambiguity: a class
// deriving from H and from a probe that has the name sees two candidates only if H has it too.
// A final class cannot be probed (and `&H::point` misses templates and overloads, so a misfit
// would be skipped silently): check_hook rejects final hook types instead.
#define RUNHOOKS_DETAIL_NAME_PROBE(point)                                                  \
  struct point##_probe {                                                                   \
    void point();                                                                          \
  };                                                                                       \
  template <class H>                                                                       \
  struct point##_probed : H, point##_probe {};                                             \
  template <class H>                                                                       \
  concept names_##point = std::is_class_v<H> && !std::is_final_v<H> &&                     \
                          !requires { &point##_probed<H>::point; };

RUNHOOKS_DETAIL_NAME_PROBE(begin)
RUNHOOKS_DETAIL_NAME_PROBE(after_create_session)
RUNHOOKS_DETAIL_NAME_PROBE(before_run)
RUNHOOKS_DETAIL_NAME_PROBE(after_run)
RUNHOOKS_DETAIL_NAME_PROBE(end)
RUNHOOKS_DETAIL_NAME_PROBE(on_exception)
#undef RUNHOOKS_DETAIL_NAME_PROBE

template <class H>
concept names_any_hook_point = names_begin<H> || names_after_create_session<H> ||
                               names_before_run<H> || names_after_run<H> || names_end<H> ||
                               names_on_exception<H>;

// Hooks are held by value; std::ref(hook) holds a reference to a hook the caller keeps. Spelled
// with <type_traits>' unwrap_reference (C++20), so that the core need not include <functional>.
template <class H>
using unwrap_hook_t = std::remove_reference_t<std::unwrap_reference_t<H>>;

template <class H>
constexpr unwrap_hook_t<H>& unwrap(H& h) noexcept {
  if constexpr (std::is_same_v<std::unwrap_reference_t<H>, H>)
    return h;
  else
    return h.get();
}

}  // namespace detail
}  // namespace runhooks
