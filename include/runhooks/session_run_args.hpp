// SessionRunArgs names what a hook (or the caller) adds to one step: values to fetch from the
// backend after it, and inputs to feed it before; SessionRunValues carries the fetched values.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/hana/basic_tuple.hpp>
#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include <runhooks/detail/type_list.hpp>

namespace runhooks {

// A name for a value a backend can produce or consume; derive from it to declare one:
//   struct Loss : runhooks::Key<float> {};
// A backend that offers Loss has `float fetch(Loss) const`; one that accepts LearningRate has
// `void feed(LearningRate, float)`.
template <class T>
struct Key {
  using value_type = T;
};

template <class K>
concept KeyType = std::is_empty_v<K> && std::is_default_constructible_v<K> &&
                  requires { typename K::value_type; };

// Fetch K after the step. `enabled` switches the fetch on or off for this step only, at run
// time; the merged type of the step does not change.
template <KeyType K>
struct Fetch {
  using key_type = K;
  bool enabled = true;
};

// Feed `value` to input K before the step.
template <KeyType K>
struct Feed {
  using key_type = K;
  typename K::value_type value;
};

template <KeyType K>
constexpr Fetch<K> fetch(bool enabled = true) noexcept {
  return {enabled};
}
template <KeyType K>
constexpr Feed<K> feed(typename K::value_type value) {
  return {std::move(value)};
}

namespace detail {
template <class T>
inline constexpr bool is_fetch = false;
template <class K>
inline constexpr bool is_fetch<Fetch<K>> = true;
template <class T>
inline constexpr bool is_feed = false;
template <class K>
inline constexpr bool is_feed<Feed<K>> = true;

// Which slot a SessionRunValues keeps for each item: a result for a fetch, nothing for a feed.
template <class Item>
struct result_slot {
  struct type {};
};
template <class K>
struct result_slot<Fetch<K>> {
  using type = std::optional<typename K::value_type>;
};
}  // namespace detail

// What one hook's before_run() (or the caller's run()) adds to the step: any number of
// Fetch<K> and Feed<K>, each key at most once. Build it with
//   return runhooks::SessionRunArgs{runhooks::fetch<Loss>(), runhooks::feed<LearningRate>(lr)};
template <class... Items>
struct SessionRunArgs {
  static_assert((... && (detail::is_fetch<Items> || detail::is_feed<Items>)),
                "runhooks::SessionRunArgs takes only runhooks::fetch<K>() and "
                "runhooks::feed<K>(value) items");
  static_assert(
      [] {
        constexpr std::size_t n = sizeof...(Items);
        constexpr std::size_t first[] = {detail::index_of<Items, Items...>..., 0};
        for (std::size_t i = 0; i < n; ++i)
          if (first[i] != i) return false;
        return true;
      }(),
      "runhooks::SessionRunArgs names the same fetch or feed twice: name each key once");

  constexpr SessionRunArgs() = default;
  constexpr explicit SessionRunArgs(Items... items)
    requires(sizeof...(Items) > 0)
      : items_{std::move(items)...} {}

  template <class Item>
  static constexpr bool has = detail::contains<Item, Items...>;

  template <class Item>
  constexpr const Item& get() const noexcept {
    return boost::hana::at_c<detail::index_of<Item, Items...>>(items_);
  }

  // Calls f.template operator()<Item>() for each item type, in order.
  template <class F>
  static constexpr void for_each_item_type([[maybe_unused]] F f) {
    (f.template operator()<Items>(), ...);
  }

  template <class F>
  constexpr void for_each(F&& f) const {
    boost::hana::for_each(items_, f);
  }

 private:
  boost::hana::basic_tuple<Items...> items_;
};

template <class... Items>
SessionRunArgs(Items...) -> SessionRunArgs<Items...>;

namespace detail {
// The fetches of an args type, without its feeds: what the caller's results are keyed by, so
// that run() returns the same type whatever it feeds.
template <class Out, class... In>
struct fetches_only {
  using type = Out;
};
template <class... Out, class Item, class... In>
struct fetches_only<SessionRunArgs<Out...>, Item, In...>
    : fetches_only<std::conditional_t<is_fetch<Item>, SessionRunArgs<Out..., Item>,
                                      SessionRunArgs<Out...>>,
                   In...> {};
template <class Args>
struct fetches_of;
template <class... Items>
struct fetches_of<SessionRunArgs<Items...>> : fetches_only<SessionRunArgs<>, Items...> {};
template <class Args>
using fetches_of_t = typename fetches_of<Args>::type;
}  // namespace detail

// The results of one SessionRunArgs after the step: for each Fetch<K> it asked for, the value,
// or nothing when that fetch was switched off for this step. A hook sees only its own results.
template <class Args>
class SessionRunValues;

template <class... Items>
class SessionRunValues<SessionRunArgs<Items...>> {
 public:
  template <KeyType K>
  constexpr const std::optional<typename K::value_type>& operator[](K) const noexcept {
    static_assert(detail::contains<Fetch<K>, Items...>,
                  "runhooks::SessionRunValues: this key was not fetched; add "
                  "runhooks::fetch<Key>() to what before_run returns");
    if constexpr (detail::contains<Fetch<K>, Items...>)
      return boost::hana::at_c<detail::index_of<Fetch<K>, Items...>>(slots_);
    else
      return detail::after_diagnostic<const std::optional<typename K::value_type>&>();
  }

  template <KeyType K>
  constexpr std::optional<typename K::value_type>& slot() noexcept {
    return boost::hana::at_c<detail::index_of<Fetch<K>, Items...>>(slots_);
  }

 private:
  boost::hana::basic_tuple<typename detail::result_slot<Items>::type...> slots_;
};

}  // namespace runhooks
