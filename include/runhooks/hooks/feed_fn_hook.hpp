// FeedFnHook: feeds what a function returns before every step.
#pragma once

#include <runhooks/detail/config.hpp>

#include <type_traits>
#include <utility>

#include <runhooks/session_run_args.hpp>

namespace runhooks {

namespace detail {
template <class F>
struct feed_fn_result_of {
  using type = void;
};
template <class F>
  requires std::is_invocable_v<F&>
struct feed_fn_result_of<F> {
  using type = std::remove_cvref_t<std::invoke_result_t<F&>>;
};

template <class Args>
inline constexpr bool feed_fn_result = false;
template <class... Items>
inline constexpr bool feed_fn_result<SessionRunArgs<Items...>> =
    sizeof...(Items) > 0 && (is_feed<Items> && ...);
}  // namespace detail

// TensorFlow's FeedFnHook: before every step it calls feed_fn() and feeds what it returns, a
// runhooks::SessionRunArgs of feeds only (TensorFlow: a feed_dict; fetches=None):
//   runhooks::FeedFnHook feeder{[&] { return runhooks::SessionRunArgs{runhooks::feed<X>(next_x())}; }};
// Per step: the call and the feeds, nothing else. The keys it feeds are part of the step's
// merged shape, so a hook or a caller feeding one of them too is a compile error (TensorFlow:
// "Same tensor is fed by ..." at run time).
template <class FeedFn>
class FeedFnHook {
  static_assert(std::is_invocable_v<FeedFn&>,
                "runhooks::FeedFnHook: feed_fn must be callable with no arguments and return "
                "runhooks::SessionRunArgs{runhooks::feed<Key>(value), ...}.");
  static_assert(!std::is_invocable_v<FeedFn&> ||
                    detail::feed_fn_result<typename detail::feed_fn_result_of<FeedFn>::type>,
                "runhooks::FeedFnHook: feed_fn must return runhooks::SessionRunArgs of feeds "
                "only: runhooks::SessionRunArgs{runhooks::feed<Key>(value), ...}.");

 public:
  explicit FeedFnHook(FeedFn feed_fn) : feed_fn_(std::move(feed_fn)) {}

  template <class Ctx>
  auto before_run(Ctx&) {
    return feed_fn_();
  }

  FeedFn& feed_fn() noexcept { return feed_fn_; }

 private:
  [[no_unique_address]] FeedFn feed_fn_;
};

template <class FeedFn>
FeedFnHook(FeedFn) -> FeedFnHook<FeedFn>;

}  // namespace runhooks
