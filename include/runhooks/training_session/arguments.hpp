// make_training_session's arguments sorted by kind: hooks, chief_only(...) bundles, the summary
// keys (runhooks::scalars<...>, runhooks::histograms<...>) and at most one clock.
#pragma once

#include <runhooks/detail/config.hpp>

#include <tuple>
#include <type_traits>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/training_session/chief_only.hpp>

namespace runhooks::detail {

// Sorts make_training_session's arguments by kind.
template <class T>
inline constexpr bool is_chief_only_bundle = false;
template <class... Hs>
inline constexpr bool is_chief_only_bundle<ChiefOnlyHooks<Hs...>> = true;
template <class T>
inline constexpr bool is_scalars = false;
template <class... Ks>
inline constexpr bool is_scalars<Scalars<Ks...>> = true;
template <class T>
inline constexpr bool is_histograms = false;
template <class... Ks>
inline constexpr bool is_histograms<Histograms<Ks...>> = true;
// A clock among the arguments (runhooks::ManualClock in tests): something with now() and no
// hook point. A hook with a now() member stays a hook.
template <class T>
inline constexpr bool is_clock_argument = Clock<T> && !names_any_hook_point<T>;
template <class T>
inline constexpr bool is_plain_hook =
    !is_chief_only_bundle<T> && !is_scalars<T> && !is_histograms<T> && !is_clock_argument<T>;

// The clock of the timed default hooks: the clock argument, or SteadyClock.
template <class... Args>
struct clock_of {
  using type = SteadyClock;
};
template <class First, class... Rest>
struct clock_of<First, Rest...> {
  using type = std::conditional_t<is_clock_argument<First>, First,
                                  typename clock_of<Rest...>::type>;
};


// The keys of every Scalars<...> (or Histograms<...>) argument, in order.
template <class Arg, class Acc>
struct join_keys {
  using type = Acc;  // an argument of another kind
};
template <class... A, class... B>
struct join_keys<Scalars<A...>, Scalars<B...>> {
  using type = Scalars<A..., B...>;
};
template <class... A, class... B>
struct join_keys<Histograms<A...>, Histograms<B...>> {
  using type = Histograms<A..., B...>;
};
template <class Empty, class... Args>
struct collect_keys {
  using type = Empty;
};
template <class Empty, class First, class... Rest>
struct collect_keys<Empty, First, Rest...> {
  using type = typename join_keys<First, typename collect_keys<Empty, Rest...>::type>::type;
};

// The arguments of one kind, as a tuple of references.
template <template <class> class Keep, class... Args>
auto select(Args&... args) {
  return std::tuple_cat([&]() -> decltype(auto) {
    if constexpr (Keep<Args>::value)
      return std::tuple<Args&>(args);
    else
      return std::tuple<>();
  }()...);
}
template <class T>
struct keep_plain : std::bool_constant<is_plain_hook<T>> {};
template <class T>
struct keep_bundle : std::bool_constant<is_chief_only_bundle<T>> {};
template <class T>
struct keep_clock : std::bool_constant<is_clock_argument<T>> {};

}  // namespace runhooks::detail
