// The exponential moving average of a module's weights that TorchStepBackend keeps (Lightning's
// EMAWeightAveraging over torch.optim.swa_utils.AveragedModel): its update, its swap into the
// module around an evaluation, and its tensors in the module's checkpoint layout.
#pragma once

#include <runhooks/detail/config.hpp>

#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace runhooks::detail {

// The module's parameters and buffers, each tensor once (a tied weight registered under two names
// is one tensor), in the order of named_parameters() then named_buffers(): what an EMA averages
// and what clipping measures (parameters only there).
inline std::vector<torch::Tensor> unique_tensors(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> unique;
  std::unordered_map<const void*, bool> seen;
  for (const torch::Tensor& tensor : tensors)
    if (seen.emplace(tensor.unsafeGetTensorImpl(), true).second) unique.push_back(tensor);
  return unique;
}

// An average kept beside a module. The floating-point parameters and buffers are averaged
// (Lightning's use_buffers=True); integer buffers (BatchNorm's num_batches_tracked) are copied,
// where Lightning's formula, applied to an integer tensor, truncates and lags forever.
//
// update(), AveragedModel.update_parameters with get_ema_avg_fn(decay): the first call copies
// the weights, every later one sets average = decay * average + (1 - decay) * weight (two
// _foreach kernels per call). Before the first update the average holds the weights it was made
// from (AveragedModel's deep copy).
class TorchWeightAverage {
 public:
  TorchWeightAverage(const torch::nn::Module& module, double decay) : decay_(decay) {
    const torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> all = module.parameters();
    for (const torch::Tensor& buffer : module.buffers()) all.push_back(buffer);
    for (const torch::Tensor& tensor : unique_tensors(all)) {
      const bool floating = tensor.is_floating_point();
      std::vector<torch::Tensor>& live = floating ? live_ : live_copied_;
      std::vector<torch::Tensor>& average = floating ? average_ : average_copied_;
      index_.emplace(tensor.unsafeGetTensorImpl(), Slot{floating, average.size()});
      live.push_back(tensor);
      average.push_back(tensor.detach().clone());
    }
  }

  void update() {
    const torch::NoGradGuard no_grad;
    if (updates_ == 0) {
      for (std::size_t i = 0; i < average_.size(); ++i) average_[i].copy_(live_[i]);
    } else if (!average_.empty()) {
      at::_foreach_mul_(average_, decay_);
      at::_foreach_add_(average_, live_, 1.0 - decay_);
    }
    for (std::size_t i = 0; i < average_copied_.size(); ++i)
      average_copied_[i].copy_(live_copied_[i]);
    ++updates_;
  }

  // The module's tensors replaced by the average, and back: swap_out() restores the weights
  // swap_in() found, bit for bit (kept in buffers allocated on the first swap).
  void swap_in() {
    const torch::NoGradGuard no_grad;
    swap_in(live_, average_, kept_);
    swap_in(live_copied_, average_copied_, kept_copied_);
  }
  void swap_out() {
    const torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < live_.size(); ++i) live_[i].copy_(kept_[i]);
    for (std::size_t i = 0; i < live_copied_.size(); ++i) live_copied_[i].copy_(kept_copied_[i]);
  }
  // The average copied into the module for good (Lightning's on_train_end).
  void copy_to_module() {
    const torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < live_.size(); ++i) live_[i].copy_(average_[i]);
    for (std::size_t i = 0; i < live_copied_.size(); ++i) live_copied_[i].copy_(average_copied_[i]);
  }

  // The average of one of the module's tensors (the tensor itself for one it does not know).
  const torch::Tensor& of(const torch::Tensor& tensor) const {
    const auto found = index_.find(tensor.unsafeGetTensorImpl());
    if (found == index_.end()) return tensor;
    return found->second.floating ? average_[found->second.index]
                                  : average_copied_[found->second.index];
  }

  // The average in the layout of Module::save of `module` (the module it was made from).
  void write(const torch::nn::Module& module, torch::serialize::OutputArchive& archive) const {
    for (const auto& item : module.named_parameters(/*recurse=*/false))
      archive.write(item.key(), of(item.value()));
    for (const auto& item : module.named_buffers(/*recurse=*/false))
      archive.write(item.key(), of(item.value()), /*is_buffer=*/true);
    for (const auto& child : module.named_children()) {
      if (!child.value()->is_serializable()) continue;
      torch::serialize::OutputArchive child_archive(archive.compilation_unit());
      write(*child.value(), child_archive);
      archive.write(child.key(), child_archive);
    }
  }
  // Reads the average back from that layout (shapes checked before: check_module_shapes).
  void read(const torch::nn::Module& module, torch::serialize::InputArchive& archive) {
    const torch::NoGradGuard no_grad;
    const auto read_one = [&](const std::string& name, const torch::Tensor& tensor,
                              bool is_buffer) {
      torch::Tensor stored;
      archive.read(name, stored, is_buffer);
      const torch::Tensor& average = of(tensor);
      if (!average.is_same(tensor)) average.copy_(stored);
    };
    for (const auto& item : module.named_parameters(/*recurse=*/false))
      read_one(item.key(), item.value(), false);
    for (const auto& item : module.named_buffers(/*recurse=*/false))
      read_one(item.key(), item.value(), true);
    for (const auto& child : module.named_children()) {
      if (!child.value()->is_serializable()) continue;
      torch::serialize::InputArchive child_archive;
      archive.read(child.key(), child_archive);
      read(*child.value(), child_archive);
    }
  }

  // How many updates (AveragedModel's n_averaged), kept by a checkpoint.
  std::int64_t updates() const noexcept { return updates_; }
  void set_updates(std::int64_t updates) noexcept { updates_ = updates; }
  double decay() const noexcept { return decay_; }

 private:
  struct Slot {
    bool floating;
    std::size_t index;
  };

  static void swap_in(const std::vector<torch::Tensor>& live,
                      const std::vector<torch::Tensor>& average, std::vector<torch::Tensor>& kept) {
    if (kept.size() != live.size()) {
      kept.clear();
      for (const torch::Tensor& tensor : live) kept.push_back(torch::empty_like(tensor));
    }
    for (std::size_t i = 0; i < live.size(); ++i) {
      kept[i].copy_(live[i]);
      live[i].copy_(average[i]);
    }
  }

  double decay_;
  std::int64_t updates_ = 0;
  std::vector<torch::Tensor> live_, average_, kept_;                       // floating point
  std::vector<torch::Tensor> live_copied_, average_copied_, kept_copied_;  // integer buffers
  std::unordered_map<const void*, Slot> index_;
};

// Reads a module's parameters and buffers from the layout of Module::save by copying into them,
// so that every tensor keeps its storage and device (Module::load would make a CUDA parameter
// share the archive's storage, or move it to the archive's device). Shapes checked before.
inline void read_module_in_place(torch::nn::Module& module,
                                 torch::serialize::InputArchive& archive) {
  const torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters(/*recurse=*/false)) {
    torch::Tensor stored;
    archive.read(item.key(), stored);
    item.value().copy_(stored);
  }
  for (auto& item : module.named_buffers(/*recurse=*/false)) {
    torch::Tensor stored;
    archive.read(item.key(), stored, /*is_buffer=*/true);
    item.value().copy_(stored);
  }
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::InputArchive child_archive;
    archive.read(child.key(), child_archive);
    read_module_in_place(*child.value(), child_archive);
  }
}

}  // namespace runhooks::detail
