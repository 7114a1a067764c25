// HasLearningRate: the backend concept through which hooks read and set the learning rate.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>

#include <runhooks/detail/type_list.hpp>

namespace runhooks {

// A backend whose optimizer's learning rate hooks may read and set (ReduceLROnPlateauHook,
// LearningRateScheduleHook, LearningRateMonitorHook).
//   Minimal complete definition: `double learning_rate() const` and
//   `void set_learning_rate(double)`, which sets the rate of every parameter group (a backend
//   keeping one rate per group reads back its first group's).
//   Semantics: set_learning_rate(x) then learning_rate() gives x, or x as the backend stores it
//   (a float32 rate gives float(x) back, as Keras' optimizer variables do).
template <class B>
concept HasLearningRate = requires(B& b, const B& cb, double rate) {
  { cb.learning_rate() } -> std::convertible_to<double>;
  b.set_learning_rate(rate);
};

namespace detail {

template <class Hook, class Backend>
struct backend_has_no_learning_rate {
  static_assert(always_false<Hook, Backend>,
                "runhooks: this hook reads and sets the learning rate, and the backend has no "
                "`double learning_rate() const` and `void set_learning_rate(double)` "
                "(runhooks::HasLearningRate; the hook and the backend are the template "
                "arguments of runhooks::detail::backend_has_no_learning_rate).");
};

// One diagnostic naming the hook and the backend when Backend lacks the learning rate; true
// either way, so that the hook's static_assert around it adds no second error.
template <class Hook, class Backend>
constexpr bool check_learning_rate() {
  if constexpr (!HasLearningRate<Backend>) (void)sizeof(backend_has_no_learning_rate<Hook, Backend>);
  return true;
}

}  // namespace detail
}  // namespace runhooks
