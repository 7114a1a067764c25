// The compile-time diagnostics of MonitoredSession: one static_assert per user mistake, each in
// a class template whose name and arguments the compiler prints (naming the hook or key type).
#pragma once

#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/near_miss.hpp>
#include <runhooks/detail/type_list.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks::detail {

// Named bools rather than the concepts themselves: both compilers then print
// `defines_a_hook_point<UserType>` in the failed requirement, and skip the concept's notes.
// A final type cannot be probed; is_not_final reports it, so it counts as defining one here,
// as does a type with a misspelt point, which check_near_misses names.
template <class Hook>
inline constexpr bool defines_a_hook_point =
    std::is_final_v<Hook> || names_any_hook_point<Hook> || near_misses_of<Hook>.any ||
    StepProfiler<Hook>;
template <class Hook>
inline constexpr bool is_not_final = !std::is_final_v<Hook>;

// The hook types in a MonitoredSession<Backend, Hook...>: each must define a hook point, and
// every member named like a hook point must have that point's signature.
template <class Hook, class Backend>
struct check_hook {
  static_assert(is_not_final<Hook>,
                "runhooks: a hook type must not be final: runhooks derives from it to find every "
                "member named like a hook point, so that none that does not fit is skipped. "
                "Remove `final` from the hook type (the argument of "
                "runhooks::detail::is_not_final).");
  static_assert(check_near_misses<Hook>::value);
  static_assert(defines_a_hook_point<Hook>,
                "runhooks: this type is not a hook: it defines none of begin(), "
                "after_create_session(session[, coord]), before_run(run_context), "
                "after_run(run_context, run_values) or end(session) (check their spelling). The "
                "hook type is the argument of runhooks::detail::defines_a_hook_point.");
  static_assert(!names_begin<Hook> || HasBegin<Hook>,
                "runhooks: the hook's begin() does not fit. Write `void begin()`.");
  static_assert(!names_after_create_session<Hook> || HasAfterCreateSession<Hook, Backend>,
                "runhooks: the hook's after_create_session does not fit. Write "
                "`void after_create_session(auto& session)`, or add `runhooks::Coordinator& "
                "coord` as a second parameter to use the coordinator.");
  static_assert(!names_end<Hook> || HasEnd<Hook, Backend>,
                "runhooks: the hook's end does not fit. Write `void end(auto& session)`.");
  static_assert(!names_on_exception<Hook> || HasOnException<Hook, Backend>,
                "runhooks: the hook's on_exception does not fit. Write `void on_exception(auto& "
                "session, const std::exception_ptr& error)`.");
  static constexpr bool value = true;
};

template <class Hook, class Result>
inline constexpr bool before_run_returns_void_or_session_run_args = before_run_result<Result>;

template <class Hook, class Ctx, class Result>
struct check_before_run_result {
  static_assert(before_run_returns_void_or_session_run_args<Hook, Result>,
                "runhooks: before_run must return void or runhooks::SessionRunArgs{...}; the "
                "hook type and what it returns are named in this instantiation.");
  static constexpr bool value = true;
};

// What a callable before_run returns; void for one that cannot be called.
template <class Hook, class Ctx>
struct before_run_result_of {
  using type = void;
};
template <class Hook, class Ctx>
  requires callable_before_run<Hook, Ctx>
struct before_run_result_of<Hook, Ctx> {
  using type = decltype(std::declval<Hook&>().before_run(std::declval<Ctx&>()));
};

// Checked where run() is instantiated, since the context type depends on the caller's args.
// A before_run that does not fit is not called (HasBeforeRun is false), so this is the only
// error the user sees.
template <class Hook, class Ctx>
struct check_before_run {
  static_assert(!names_before_run<Hook> || callable_before_run<Hook, Ctx>,
                "runhooks: the hook's before_run does not fit. Write `void before_run(auto& "
                "run_context)` or return runhooks::SessionRunArgs{...} from it.");
  static_assert(check_before_run_result<Hook, Ctx,
                                        typename before_run_result_of<Hook, Ctx>::type>::value);
  static constexpr bool value = true;
};

template <class Hook, class Ctx, class Values>
struct check_after_run {
  static_assert(!names_after_run<Hook> || HasAfterRun<Hook, Ctx, Values>,
                "runhooks: the hook's after_run does not fit. Write `void after_run(auto& "
                "run_context, const auto& run_values)`.");
  static constexpr bool value = true;
};

// Feed conflicts, found when the step's merged shape is computed (TensorFlow finds them at run
// time, on every step). The key and both feeders are the template arguments.
template <class Key, class FirstHook, class SecondHook>
struct two_hooks_feed_one_input {
  static_assert(always_false<Key, FirstHook, SecondHook>,
                "runhooks: two hooks feed the same input (TensorFlow: 'Same tensor is fed by two "
                "hooks'). The key and both hook types are the template arguments of "
                "runhooks::detail::two_hooks_feed_one_input; feed each input from one hook only.");
};

template <class Key, class Hook>
struct hook_and_caller_feed_one_input {
  static_assert(always_false<Key, Hook>,
                "runhooks: a hook and the caller of run() feed the same input (TensorFlow: "
                "'Same tensor is fed by a SessionRunHook and user'). The key and the hook type "
                "are the template arguments of runhooks::detail::hook_and_caller_feed_one_input; "
                "feed it from one place only.");
};

template <class Key, class Backend>
struct backend_cannot_fetch {
  static_assert(always_false<Key, Backend>,
                "runhooks: a hook or the caller fetches a key the backend does not offer. Give "
                "the backend `value_type fetch(Key) const` (key and backend are the template "
                "arguments of runhooks::detail::backend_cannot_fetch).");
};

template <class Key, class Backend>
struct backend_cannot_feed {
  static_assert(always_false<Key, Backend>,
                "runhooks: a hook or the caller feeds a key the backend does not accept. Give "
                "the backend `void feed(Key, value_type)` (key and backend are the template "
                "arguments of runhooks::detail::backend_cannot_feed).");
};

template <class Item, class OtherArgs>
inline constexpr bool feeds_same = [] {
  if constexpr (is_feed<Item>)
    return OtherArgs::template has<Item>;
  else
    return false;
}();

// Instantiates a diagnostic for each input that both A's and B's requests feed.
template <class HookA, class ArgsA, class HookB, class ArgsB>
constexpr void check_hook_feeds() {
  ArgsA::for_each_item_type([]<class Item>() {
    if constexpr (feeds_same<Item, ArgsB>)
      (void)sizeof(two_hooks_feed_one_input<typename Item::key_type, HookA, HookB>);
  });
}

template <class Hook, class ArgsHook, class ArgsCaller>
constexpr void check_caller_feeds() {
  ArgsHook::for_each_item_type([]<class Item>() {
    if constexpr (feeds_same<Item, ArgsCaller>)
      (void)sizeof(hook_and_caller_feed_one_input<typename Item::key_type, Hook>);
  });
}

template <class Backend, class Args>
constexpr void check_backend_keys() {
  Args::for_each_item_type([]<class Item>() {
    using K = typename Item::key_type;
    if constexpr (is_fetch<Item> && !CanFetch<Backend, K>)
      (void)sizeof(backend_cannot_fetch<K, Backend>);
    if constexpr (is_feed<Item> && !CanFeed<Backend, K>)
      (void)sizeof(backend_cannot_feed<K, Backend>);
  });
}

}  // namespace runhooks::detail
