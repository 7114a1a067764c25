// The compile-time diagnostics of MonitoredSession: one static_assert per user mistake, each in
// a class template whose name and arguments the compiler prints (naming the hook or key type).
#pragma once

#include <cstddef>
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
                "runhooks: run() fetches a key the backend does not offer. Give the backend "
                "`value_type fetch(Key) const` (key and backend are the template "
                "arguments of runhooks::detail::backend_cannot_fetch).");
};

// Keys a hook produces (ProducesKey): found when the step's merged shape is computed. Each names
// the key and the hook that reads it.
template <class Key, class Hook, class Backend>
struct no_producer_of_key {
  static_assert(always_false<Key, Hook, Backend>,
                "runhooks: a hook reads a key that neither the backend fetches nor a hook "
                "declared before it produces. Give the backend `value_type fetch(Key) const`, or "
                "declare a hook that produces the key (an EvaluationHook listing it) before this "
                "one (the key, the hook and the backend are the template arguments of "
                "runhooks::detail::no_producer_of_key).");
};

template <class Key, class Hook, class Producer>
struct key_produced_after_its_reader {
  static_assert(always_false<Key, Hook, Producer>,
                "runhooks: a hook reads a key that only a hook declared after it produces, so it "
                "would never see the value of its step. Move the reading hook after the producing "
                "one in the session's list of hooks (the key, the reading hook and the producer "
                "are the template arguments of runhooks::detail::key_produced_after_its_reader).");
};

template <class Key, class Producer>
struct caller_fetches_produced_key {
  static_assert(always_false<Key, Producer>,
                "runhooks: run() fetches a key that the backend does not offer and a hook "
                "produces; the caller's values come from the backend alone. Read the producing "
                "hook's values after run() (EvaluationHook::last()) instead (the key and the "
                "producer are the template arguments of "
                "runhooks::detail::caller_fetches_produced_key).");
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

template <std::size_t I, class T, class... Ts>
struct type_at : type_at<I - 1, Ts...> {};
template <class T, class... Ts>
struct type_at<0, T, Ts...> {
  using type = T;
};

// Which of a session's hooks (the stored types of its hook tuple, std::ref included) produce K.
template <class K, class HookTuple>
struct producers_of;
template <class K, template <class...> class Tuple, class... Hooks>
struct producers_of<K, Tuple<Hooks...>> {
  static constexpr bool produces[sizeof...(Hooks) + 1] = {ProducesKey<unwrap_hook_t<Hooks>, K>...,
                                                          false};
  // The last producer among the first `end` hooks, or npos.
  static constexpr std::size_t last_before(std::size_t end) {
    for (std::size_t i = end; i-- > 0;)
      if (produces[i]) return i;
    return npos;
  }
  // The first producer at `begin` or after, or npos.
  static constexpr std::size_t first_from(std::size_t begin) {
    for (std::size_t i = begin; i < sizeof...(Hooks); ++i)
      if (produces[i]) return i;
    return npos;
  }
  template <std::size_t J>
  using hook = unwrap_hook_t<typename type_at<J, Hooks..., void>::type>;  // void: no hooks
};

// The caller's keys: each one the backend offers (a key that only a hook produces is not the
// caller's to fetch: caller_fetches_produced_key).
template <class Backend, class HookTuple, class Args>
constexpr void check_backend_keys() {
  Args::for_each_item_type([]<class Item>() {
    using K = typename Item::key_type;
    if constexpr (is_fetch<Item> && !CanFetch<Backend, K>) {
      using P = producers_of<K, HookTuple>;
      constexpr std::size_t producer = P::first_from(0);
      if constexpr (producer != npos)
        (void)sizeof(caller_fetches_produced_key<K, typename P::template hook<producer>>);
      else
        (void)sizeof(backend_cannot_fetch<K, Backend>);
    }
    if constexpr (is_feed<Item> && !CanFeed<Backend, K>)
      (void)sizeof(backend_cannot_feed<K, Backend>);
  });
}

// Hook I's keys: each fetch the backend's or produced by a hook declared before it; each feed
// one the backend accepts.
template <class Backend, class HookTuple, std::size_t I, class Hook, class Args>
constexpr void check_hook_request_keys() {
  Args::for_each_item_type([]<class Item>() {
    using K = typename Item::key_type;
    if constexpr (is_fetch<Item>) {
      using P = producers_of<K, HookTuple>;
      if constexpr (P::last_before(I) == npos && !CanFetch<Backend, K>) {
        constexpr std::size_t producer = P::first_from(I + 1);
        if constexpr (producer != npos)
          (void)sizeof(key_produced_after_its_reader<K, Hook, typename P::template hook<producer>>);
        else
          (void)sizeof(no_producer_of_key<K, Hook, Backend>);
      }
    }
    if constexpr (is_feed<Item> && !CanFeed<Backend, K>)
      (void)sizeof(backend_cannot_feed<K, Backend>);
  });
}

}  // namespace runhooks::detail
