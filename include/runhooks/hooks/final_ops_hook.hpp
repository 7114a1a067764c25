// FinalOpsHook: reads values from the backend once, when the session ends cleanly, and keeps them.
#pragma once

#include <runhooks/detail/config.hpp>

#include <optional>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/error.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

namespace detail {
template <class Args>
inline constexpr bool feeds_only = false;
template <class... Items>
inline constexpr bool feeds_only<SessionRunArgs<Items...>> = (is_feed<Items> && ...);

inline constexpr const char* final_ops_input_warning =
    "An OutOfRangeError or StopIteration exception is raised by the code in FinalOpsHook. This "
    "typically means the Ops running by the FinalOpsHook have a dependency back to some input "
    "source, which should not happen. For example, for metrics in tf.estimator.Estimator, all "
    "metrics functions return two Ops: `value_op` and  `update_op`. Estimator.evaluate calls the "
    "`update_op` for each batch of the data in input source and, once it is exhausted, it call "
    "the `value_op` to get the metric values. The `value_op` here should have dependency back to "
    "variables reading only, rather than reading another batch from input. Otherwise, the "
    "`value_op`, executed by `FinalOpsHook`, triggers another data reading, which ends "
    "OutOfRangeError/StopIteration. Please fix that.";
}  // namespace detail

template <class KeyList, class Feeds = SessionRunArgs<>>
class FinalOpsHook;

// TensorFlow's FinalOpsHook. In end(), and only there, it hands the optional feeds to the
// backend's feed() and reads every key with the backend's fetch(), without a step (TensorFlow's
// session.run(final_ops, feed_dict) on the raw session); final_ops_values() then holds them.
// end() runs only when the session ends cleanly (close(), the end of run_loop, the destructor
// after a normal exit), so after an error there are no final values, as in TensorFlow. A fetch
// that throws OutOfRangeError or StopIteration logs TensorFlow's warning ("... have a dependency
// back to some input source ...") and the error propagates. No per-step cost: the hook has no
// per-step callback.
//
// Differs from TensorFlow: the warning is at warning level, as TensorFlow's; the keys are a
// list, and the values a runhooks::KeyValues (values[Key{}]) rather than a nested structure.
template <KeyType... Ks, class... FeedItems>
class FinalOpsHook<Keys<Ks...>, SessionRunArgs<FeedItems...>> {
  static_assert(sizeof...(Ks) > 0,
                "runhooks::FinalOpsHook needs at least one key: FinalOpsHook{runhooks::keys<Accuracy>}");
  static_assert(detail::feeds_only<SessionRunArgs<FeedItems...>>,
                "runhooks::FinalOpsHook: the second argument holds the final feeds only "
                "(runhooks::SessionRunArgs{runhooks::feed<Key>(value), ...}).");

 public:
  using values_type = KeyValues<Ks...>;

  explicit FinalOpsHook(Keys<Ks...>, SessionRunArgs<FeedItems...> feeds = {})
      : feeds_(std::move(feeds)) {}

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(detail::check_hook_keys<FinalOpsHook, Backend, Ks...>());
    static_assert(
        detail::check_hook_feed_keys<FinalOpsHook, Backend, typename FeedItems::key_type...>());
  }

  template <class Backend>
  void end(Backend& session) {
    if constexpr (detail::fetches_all<Backend, Ks...> &&
                  (CanFeed<Backend, typename FeedItems::key_type> && ...)) {
      try {
        if constexpr (sizeof...(FeedItems) > 0)
          feeds_.for_each([&](const auto& item) {
            session.feed(typename std::remove_cvref_t<decltype(item)>::key_type{}, item.value);
          });
        values_.emplace(values_type::from_backend(session));
      } catch (const OutOfRangeError&) {
        log(Severity::warning, detail::final_ops_input_warning);
        throw;
      } catch (const StopIteration&) {
        log(Severity::warning, detail::final_ops_input_warning);
        throw;
      }
    }
  }

  // The values end() read, or nothing before it ran (and after an error ended the session).
  const std::optional<values_type>& final_ops_values() const noexcept { return values_; }

 private:
  SessionRunArgs<FeedItems...> feeds_;
  std::optional<values_type> values_;
};

template <KeyType... Ks>
FinalOpsHook(Keys<Ks...>) -> FinalOpsHook<Keys<Ks...>>;
template <KeyType... Ks, class... FeedItems>
FinalOpsHook(Keys<Ks...>, SessionRunArgs<FeedItems...>)
    -> FinalOpsHook<Keys<Ks...>, SessionRunArgs<FeedItems...>>;

}  // namespace runhooks
