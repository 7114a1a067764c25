// Lists of keys for the hooks that fetch several values (LoggingTensorHook, SummarySaverHook,
// FinalOpsHook, ProgressBarHook, ...), the name a hook shows for a key, and KeyValues, the values
// of such a list after a step.
#pragma once

#include <runhooks/detail/config.hpp>

#include <boost/hana/at.hpp>
#include <boost/hana/basic_tuple.hpp>

#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include <runhooks/detail/type_list.hpp>
#include <runhooks/detail/type_name.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

// A list of keys, passed to a hook's constructor as a value so that the hook's type is deduced:
//   runhooks::LoggingTensorHook hook{runhooks::keys<Loss, Accuracy>, {.every_n_iter = 100}};
template <KeyType... Ks>
struct Keys {
  static constexpr std::size_t size = sizeof...(Ks);
};
template <KeyType... Ks>
inline constexpr Keys<Ks...> keys{};

namespace detail {
// "ns::Loss" -> "Loss"; a template name ("Metric<3>") is kept whole.
constexpr std::string_view unqualified(std::string_view name) noexcept {
  if (name.find('<') != std::string_view::npos) return name;
  const std::size_t colons = name.rfind("::");
  return colons == std::string_view::npos ? name : name.substr(colons + 2);
}

template <class T, class...>
struct first {
  using type = T;
};
template <class... Ts>
using first_t = typename first<Ts...>::type;

template <class K>
concept named_key = requires {
  { K::name } -> std::convertible_to<std::string_view>;
};
}  // namespace detail

// The name a hook shows for key K in log lines, summaries and progress bars: K::name when the key
// defines one (`struct Loss : runhooks::Key<float> { static constexpr std::string_view name =
// "loss"; };`, TensorFlow's tensor name), else the key's type name without its namespaces.
template <KeyType K>
constexpr std::string_view key_name() noexcept {
  if constexpr (detail::named_key<K>)
    return std::string_view(K::name);
  else
    return detail::unqualified(detail::type_name<K>());
}

// The values of a list of keys, one of each: what a LoggingTensorHook formatter receives and
// what FinalOpsHook keeps. values[Loss{}] is the value; for_each(f) calls f(key_name, value) in
// the list's order.
template <KeyType... Ks>
class KeyValues {
 public:
  constexpr KeyValues() = default;
  constexpr explicit KeyValues(typename Ks::value_type... values) : values_{std::move(values)...} {}

  // The values fetched in a step in which every key of the list was fetched.
  template <class Values>
  static KeyValues from_run_values(const Values& run_values) {
    return KeyValues(*run_values[Ks{}]...);
  }

  // Each key read from the backend directly (no step, no hook): TensorFlow's session.run(tensors)
  // in a hook's end().
  template <class Backend>
  static KeyValues from_backend(Backend& backend) {
    return KeyValues(backend.fetch(Ks{})...);
  }

  template <KeyType K>
  constexpr const typename K::value_type& operator[](K) const noexcept {
    static_assert(detail::contains<K, Ks...>,
                  "runhooks::KeyValues: this key is not in the hook's list of keys");
    return boost::hana::at_c<detail::index_of<K, Ks...>>(values_);
  }

  template <class F>
  void for_each(F&& f) const {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (f(key_name<Ks>(), boost::hana::at_c<I>(values_)), ...);
    }(std::index_sequence_for<Ks...>{});
  }

  static constexpr std::size_t size() noexcept { return sizeof...(Ks); }

 private:
  boost::hana::basic_tuple<typename Ks::value_type...> values_;
};

}  // namespace runhooks
