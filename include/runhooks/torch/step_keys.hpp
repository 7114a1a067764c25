// The keys a libtorch backend offers its hooks for every step: the batch's loss (TorchBackend and
// TorchStepBackend) and the gradients' total norm (TorchStepBackend).
#pragma once

#include <runhooks/detail/config.hpp>

#include <string_view>

#include <runhooks/session_run_args.hpp>

namespace runhooks {

// The mean loss of the batch the last step trained on (computed before its update; with gradient
// accumulation, the mean of its micro-batches' losses). Named "loss" in log lines and summaries.
struct BatchLoss : Key<float> {
  static constexpr std::string_view name = "loss";
};

// The 2-norm of all the last step's gradients together, before clipping (what
// torch::nn::utils::clip_grad_norm_ returns; Lightning logs it as grad_2.0_norm_total). Named
// "grad_norm".
struct GradientNorm : Key<float> {
  static constexpr std::string_view name = "grad_norm";
};

}  // namespace runhooks
