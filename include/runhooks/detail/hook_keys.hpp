// The diagnostic of the built-in hooks that fetch keys: a key the backend cannot fetch is one
// static_assert naming the hook, the key and the backend.
#pragma once

#include <runhooks/concepts.hpp>
#include <runhooks/detail/type_list.hpp>

namespace runhooks::detail {

template <class Hook, class Key, class Backend>
struct hook_key_not_fetchable {
  static_assert(always_false<Hook, Key, Backend>,
                "runhooks: a hook is given a key the backend cannot fetch. Give the backend "
                "`value_type fetch(Key) const`, or give the hook another key (the hook, the key "
                "and the backend are the template arguments of "
                "runhooks::detail::hook_key_not_fetchable).");
};

template <class Hook, class Key, class Backend>
struct hook_key_not_feedable {
  static_assert(always_false<Hook, Key, Backend>,
                "runhooks: a hook is given a key to feed that the backend does not accept. Give "
                "the backend `void feed(Key, value_type)`, or feed another key (the hook, the "
                "key and the backend are the template arguments of "
                "runhooks::detail::hook_key_not_feedable).");
};

template <class Hook, class Backend, class... Ks>
constexpr bool check_hook_feed_keys() {
  (
      [] {
        if constexpr (!CanFeed<Backend, Ks>) (void)sizeof(hook_key_not_feedable<Hook, Ks, Backend>);
      }(),
      ...);
  return true;  // the key's own message is the one error
}

// Instantiates one diagnostic per key Backend cannot fetch, and returns true either way, so that
// the hook's static_assert around it adds no second error. A hook asks this in
// after_create_session, and then requests no fetch at all (detail::fetches_all), so that the
// session's own check does not report the same key again.
template <class Hook, class Backend, class... Ks>
constexpr bool check_hook_keys() {
  (
      [] {
        if constexpr (!CanFetch<Backend, Ks>) (void)sizeof(hook_key_not_fetchable<Hook, Ks, Backend>);
      }(),
      ...);
  return true;  // the key's own message is the one error: a false here would add a second
}

template <class Backend, class... Ks>
inline constexpr bool fetches_all = (CanFetch<Backend, Ks> && ...);

}  // namespace runhooks::detail
