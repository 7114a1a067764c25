// StepOutput: what the step function of a TorchStepBackend returns when it reports more than its
// loss: named metrics, as tensors, that hooks fetch by key.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/types.h>

#include <array>
#include <cstddef>
#include <type_traits>

#include <runhooks/session_run_args.hpp>

namespace runhooks {

namespace detail {
template <class K, class... Keys>
inline constexpr std::size_t step_key_count = (std::size_t{0} + ... + (std::is_same_v<K, Keys> ? 1u : 0u));
template <class... Keys>
inline constexpr bool distinct_step_keys = ((step_key_count<Keys, Keys...> == 1) && ...);
}  // namespace detail

// The loss to back-propagate and one tensor per key, in the order of Keys:
//
//   struct TokenAccuracy : runhooks::Key<float> {
//     static constexpr std::string_view name = "token_accuracy";
//   };
//   auto step = [&](GPT& model) {
//     auto [x, y] = data.train_batch();
//     torch::Tensor logits = model->forward(x);
//     torch::Tensor loss = torch::nn::functional::cross_entropy(logits.flatten(0, 1), y.flatten());
//     return runhooks::StepOutput<TokenAccuracy>{loss, {(logits.argmax(-1) == y).to(torch::kFloat).mean()}};
//   };
//
// The backend keeps each metric detached (the mean over the micro-batches with accumulation) and
// converts it with .item() only when a hook fetches its key: backend.fetch(TokenAccuracy{}). A
// metric that would cost work to compute costs it every step: give a cheap tensor (the work is
// queued on the device, never waited for), or compute the expensive one in evaluate().
template <class... Keys>
struct StepOutput {
  static_assert((KeyType<Keys> && ...),
                "runhooks::StepOutput<Keys...>: every key is an empty struct deriving from "
                "runhooks::Key<float> (or Key<double>)");
  static_assert((std::is_floating_point_v<typename Keys::value_type> && ...),
                "runhooks::StepOutput<Keys...>: a metric key's value type must be float or double "
                "(derive it from runhooks::Key<float>): the backend averages the metric over "
                "micro-batches and converts it with .item()");

  static_assert(detail::distinct_step_keys<Keys...>,
                "runhooks::StepOutput<Keys...>: a key appears twice; name each metric once");

  torch::Tensor loss;
  std::array<torch::Tensor, sizeof...(Keys)> metrics;
};

namespace detail {
template <class T>
struct step_output_traits {
  static constexpr bool is_output = false;
  template <class K>
  static constexpr bool has = false;
  static constexpr std::size_t size = 0;
};
template <class... Keys>
struct step_output_traits<StepOutput<Keys...>> {
  static constexpr bool is_output = true;
  template <class K>
  static constexpr bool has = (std::is_same_v<K, Keys> || ...);
  static constexpr std::size_t size = sizeof...(Keys);
  // The index of K in Keys.
  template <class K>
  static constexpr std::size_t index() {
    std::size_t i = 0, found = 0;
    ((std::is_same_v<K, Keys> ? (found = i, ++i) : ++i), ...);
    return found;
  }
};
}  // namespace detail

}  // namespace runhooks
