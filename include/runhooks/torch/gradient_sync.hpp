// The gradient-synchronization policy of the libtorch backends, and its default: none.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/nn/module.h>

namespace runhooks {

// The default gradient synchronization of a TorchBackend or TorchStepBackend: none (one
// process). Its after_backward is empty and inline, so a step is what it was before the policy
// existed. A policy is a type with `void after_backward(torch::nn::Module& model)`, called after
// the step's last backward() and before Optimizer::step() in every run(), and optionally
// `void zero_grad(Optimizer&)`, called instead of the optimizer's zero_grad() at the start of
// run(); runhooks::GradientAllreduce (<runhooks/torch/distributed/gradient_allreduce.hpp>)
// averages the gradients over ranks.
struct NoGradientSync {
  void after_backward(const torch::nn::Module&) const noexcept {}
};

}  // namespace runhooks
