// The compile-time diagnostics of MonitoredSession: one static_assert per user mistake, each in
// a class template whose name and arguments the compiler prints (naming the hook or key type).
#pragma once

#include <type_traits>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/type_list.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks::detail {

template <class T>
inline constexpr bool is_session_run_args = false;
template <class... Items>
inline constexpr bool is_session_run_args<SessionRunArgs<Items...>> = true;

// The hook types in a MonitoredSession<Backend, Hook...>: each must define a hook point, and
// every member named like a hook point must have that point's signature.
template <class Hook, class Backend>
struct check_hook {
  static_assert(names_any_hook_point<Hook>,
                "runhooks: this type is not a hook: it defines none of begin(), "
                "after_create_session(session, coord), before_run(run_context), "
                "after_run(run_context, run_values) or end(session). The hook type is named in "
                "the instantiation of runhooks::detail::check_hook above.");
  static_assert(!names_begin<Hook> || HasBegin<Hook>,
                "runhooks: the hook's begin() does not fit. Write `void begin()`.");
  static_assert(!names_after_create_session<Hook> || HasAfterCreateSession<Hook, Backend>,
                "runhooks: the hook's after_create_session does not fit. Write "
                "`void after_create_session(auto& session, runhooks::Coordinator& coord)`.");
  static_assert(!names_end<Hook> || HasEnd<Hook, Backend>,
                "runhooks: the hook's end does not fit. Write `void end(auto& session)`.");
  static constexpr bool value = true;
};

// Checked where run() is instantiated, since the context type depends on the caller's args.
template <class Hook, class Ctx>
struct check_before_run {
  static_assert(!names_before_run<Hook> || HasBeforeRun<Hook, Ctx>,
                "runhooks: the hook's before_run does not fit. Write `void before_run(auto& "
                "run_context)` or return runhooks::SessionRunArgs{...} from it.");
  static constexpr bool value = true;
};

template <class Hook, class Ctx, class Result>
struct check_before_run_result {
  static_assert(std::is_void_v<Result> || is_session_run_args<std::remove_cvref_t<Result>>,
                "runhooks: before_run must return void or runhooks::SessionRunArgs{...}; the "
                "hook type and what it returns are named in this instantiation.");
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
