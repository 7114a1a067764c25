// The total norm of a model's gradients and clipping by it, as torch::nn::utils::clip_grad_norm_
// computes them (the same kernels, so the same bits), but leaving the norm a tensor: libtorch's
// function returns it as a double, an .item() and so a host-device synchronization every step.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/types.h>

#include <optional>
#include <utility>
#include <vector>

namespace runhooks::detail {

class TorchGradientNorm {
 public:
  // `parameters`: each once (a tied weight counted twice would count its gradient twice).
  explicit TorchGradientNorm(std::vector<torch::Tensor> parameters)
      : parameters_(std::move(parameters)) {}

  // The 2-norm of all the gradients together (of the parameters that have one), a 0-dim tensor
  // on their device; 0 (a CPU tensor) when none has one. Nothing waits for the device.
  torch::Tensor total() const {
    norms_.clear();
    for (const torch::Tensor& parameter : parameters_) {
      const torch::Tensor& grad = parameter.grad();
      if (grad.defined()) norms_.push_back(grad.data().norm(2.0));
    }
    if (norms_.empty()) return torch::zeros({});
    return norms_.size() == 1 ? norms_[0] : torch::stack(norms_).norm(2.0);
  }

  // Scales every gradient by min(1, max_norm / (total + 1e-6)), clip_grad_norm_'s factor; returns
  // the total norm before clipping, as a tensor.
  torch::Tensor clip(double max_norm) {
    torch::Tensor norm = total();
    if (norms_.empty()) return norm;
    const torch::Tensor factor =
        torch::clamp(max_norm / (norm + 1e-6), std::nullopt /* min */, 1.0 /* max */);
    for (const torch::Tensor& parameter : parameters_) {
      const torch::Tensor& grad = parameter.grad();
      if (grad.defined()) grad.data().mul_(factor);
    }
    return norm;
  }

  const std::vector<torch::Tensor>& parameters() const noexcept { return parameters_; }

 private:
  std::vector<torch::Tensor> parameters_;
  mutable std::vector<torch::Tensor> norms_;  // reused: no allocation of the vector per step
};

}  // namespace runhooks::detail
