// TorchStepOptions: what a TorchStepBackend does around the user's step (gradient clipping,
// accumulation, the weights' moving average, the device), checked when the backend is made.
#pragma once

#include <runhooks/detail/config.hpp>

#include <ATen/Context.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <runhooks/detail/checked.hpp>

namespace runhooks {

struct TorchStepOptions {
  // Clip the gradients to this total 2-norm before the optimizer's step (Lightning's
  // gradient_clip_val with gradient_clip_algorithm="norm"; torch::nn::utils::clip_grad_norm_).
  // nullopt: no clipping. Greater than 0 and finite.
  std::optional<double> clip_grad_norm = std::nullopt;
  // Micro-batches per optimizer step (Lightning's accumulate_grad_batches): the step function is
  // called this many times per run(), each loss divided by it before backward(). At least 1.
  std::int64_t accumulation_steps = 1;
  // Keep an exponential moving average of the weights with this decay (Lightning's
  // EMAWeightAveraging(decay=0.999)), swapped in for evaluate() and saved as the model.
  // nullopt: none. Strictly between 0 and 1.
  std::optional<double> ema_decay = std::nullopt;
  // Update the average after the steps of index i (0-based) with i >= ema_start_step and
  // i % ema_every_n_steps == 0 (EMAWeightAveraging's update_starting_at_step, default None = 0,
  // and update_every_n_steps). At least 0 and at least 1.
  std::int64_t ema_start_step = 0;
  std::int64_t ema_every_n_steps = 1;
  // Where the model trains: the backend moves the model there when it is made. torch::kCPU or a
  // CUDA device (when libtorch has one).
  torch::Device device = torch::kCPU;

  // std::invalid_argument naming the option and its value otherwise.
  const TorchStepOptions& validate() const {
    const auto fail = [](const std::string& option, const std::string& rule,
                         const std::string& value) {
      throw std::invalid_argument("runhooks: TorchStepOptions::" + option + " must be " + rule +
                                  ", got " + value + ".");
    };
    if (clip_grad_norm && !(*clip_grad_norm > 0.0 && std::isfinite(*clip_grad_norm)))
      fail("clip_grad_norm", "greater than 0 and finite (or std::nullopt: no clipping)",
           detail::format_number(*clip_grad_norm));
    if (accumulation_steps < 1)
      fail("accumulation_steps", "at least 1", std::to_string(accumulation_steps));
    if (ema_decay && !(*ema_decay > 0.0 && *ema_decay < 1.0))
      fail("ema_decay", "greater than 0 and less than 1 (or std::nullopt: no average)",
           detail::format_number(*ema_decay));
    if (ema_start_step < 0) fail("ema_start_step", "at least 0", std::to_string(ema_start_step));
    if (ema_every_n_steps < 1)
      fail("ema_every_n_steps", "at least 1", std::to_string(ema_every_n_steps));
    if (!device.is_cpu() && !device.is_cuda())
      fail("device", "torch::kCPU or a CUDA device", device.str());
    if (device.is_cuda() && !at::hasCUDA())
      fail("device", "a device this libtorch has (it has no CUDA, or no CUDA device is visible)",
           device.str());
    return *this;
  }
};

}  // namespace runhooks
