// What a TorchBackend's or TorchStepBackend's snapshot copies on the training thread, and how it
// writes it: host copies of a module's tensors and of an optimizer's per-parameter state, the
// generators' states and the data position, in the layout of the archive save() writes.
#pragma once

#include <runhooks/detail/config.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/cuda.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <runhooks/torch/tensor_batches.hpp>

namespace runhooks::detail {

// `from` copied into `into` when that is a host tensor of the same shape and type (a snapshot's
// buffer from the previous save: a memcpy into mapped pages), else into a new host tensor.
// Callers hold a NoGradGuard. requires_grad is carried over, so that the archive records what
// Module::save would have recorded. From a device (CUDA), the host tensor is pinned and the copy
// non-blocking: the caller synchronizes once after all its copies (sync_device_copies) before
// anything reads them.
inline torch::Tensor copy_to_host(const torch::Tensor& from, torch::Tensor into) {
  if (!from.defined()) return {};
  const bool device = !from.device().is_cpu();
  if (!into.defined() || !into.device().is_cpu() || into.scalar_type() != from.scalar_type() ||
      into.sizes() != from.sizes() || !into.is_contiguous() || (device && !into.is_pinned()))
    into = torch::empty(from.sizes(), torch::TensorOptions()
                                          .dtype(from.scalar_type())
                                          .device(torch::kCPU)
                                          .pinned_memory(device));
  if (into.requires_grad() != from.requires_grad()) into.requires_grad_(from.requires_grad());
  // A contiguous CPU tensor is its bytes: one memcpy, without copy_'s dispatch and its checks
  // (bench_torch_gpt --measure: copy_ of the GPT's 81 tensors took 1.0x-1.4x a memcpy of them).
  if (!device && from.is_contiguous())
    std::memcpy(into.data_ptr(), from.data_ptr(), from.nbytes());
  else
    into.copy_(from, /*non_blocking=*/device);
  return into;
}

// Waits for the non-blocking copies copy_to_host made from `device`: nothing on the CPU.
inline void sync_device_copies(const torch::Device& device) {
  if (!device.is_cpu()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

// A module's parameters and buffers copied to host tensors, kept from one snapshot to the next,
// and written in the layout of torch::nn::Module::save: the module's own parameters, its
// buffers, then an archive per serializable child, recursively (the layout TorchBackend::restore
// reads and checks).
struct TorchModuleCopy {
  struct Named {
    std::string name;
    torch::Tensor tensor;
  };
  std::string name;  // as the parent's child, "" for the model
  std::vector<Named> parameters, buffers;
  std::vector<TorchModuleCopy> children;

  void fill(const torch::nn::Module& module) {
    fill(module, [](const torch::Tensor& tensor) -> const torch::Tensor& { return tensor; });
  }
  // The layout of `module` with pick(tensor) copied for each of its tensors (the averaged weights
  // of an EMA in the place of the module's own).
  template <class Pick>
  void fill(const torch::nn::Module& module, const Pick& pick) {
    const auto fill_named = [&pick](std::vector<Named>& into, const auto& from) {
      std::size_t i = 0;
      for (const auto& item : from) {
        if (i == into.size()) into.emplace_back();
        into[i].name = item.key();
        into[i].tensor = copy_to_host(pick(item.value()), std::move(into[i].tensor));
        ++i;
      }
      into.resize(i);
    };
    fill_named(parameters, module.named_parameters(/*recurse=*/false));
    fill_named(buffers, module.named_buffers(/*recurse=*/false));
    std::size_t i = 0;
    for (const auto& child : module.named_children()) {
      if (!child.value()->is_serializable()) continue;  // Module::save skips them too
      if (i == children.size()) children.emplace_back();
      children[i].name = child.key();
      children[i].fill(*child.value(), pick);
      ++i;
    }
    children.resize(i);
  }

  void write(torch::serialize::OutputArchive& archive) const {
    for (const Named& p : parameters) archive.write(p.name, p.tensor);
    for (const Named& b : buffers) archive.write(b.name, b.tensor, /*is_buffer=*/true);
    for (const TorchModuleCopy& child : children) {
      torch::serialize::OutputArchive child_archive(archive.compilation_unit());
      child.write(child_archive);
      archive.write(child.name, child_archive);
    }
  }
};

// The optimizers whose per-parameter state a snapshot copies tensor by tensor: their state type,
// their options type, and which fields of the state are tensors. Another optimizer (LBFGS, one of
// the user's) is serialized on the training thread, as before.
template <class Optimizer>
struct TorchOptimizerState {
  static constexpr bool known = false;
};
template <>
struct TorchOptimizerState<torch::optim::SGD> {
  static constexpr bool known = true;
  using ParamState = torch::optim::SGDParamState;
  using Options = torch::optim::SGDOptions;
  static void copy(const ParamState& from, ParamState& into) {
    into.momentum_buffer(copy_to_host(from.momentum_buffer(), into.momentum_buffer()));
  }
};
template <class State>
void copy_adam_state(const State& from, State& into) {
  into.step(from.step());
  into.exp_avg(copy_to_host(from.exp_avg(), into.exp_avg()));
  into.exp_avg_sq(copy_to_host(from.exp_avg_sq(), into.exp_avg_sq()));
  into.max_exp_avg_sq(copy_to_host(from.max_exp_avg_sq(), into.max_exp_avg_sq()));
}
template <>
struct TorchOptimizerState<torch::optim::Adam> {
  static constexpr bool known = true;
  using ParamState = torch::optim::AdamParamState;
  using Options = torch::optim::AdamOptions;
  static void copy(const ParamState& from, ParamState& into) { copy_adam_state(from, into); }
};
template <>
struct TorchOptimizerState<torch::optim::AdamW> {
  static constexpr bool known = true;
  using ParamState = torch::optim::AdamWParamState;
  using Options = torch::optim::AdamWOptions;
  static void copy(const ParamState& from, ParamState& into) { copy_adam_state(from, into); }
};
template <>
struct TorchOptimizerState<torch::optim::Adagrad> {
  static constexpr bool known = true;
  using ParamState = torch::optim::AdagradParamState;
  using Options = torch::optim::AdagradOptions;
  static void copy(const ParamState& from, ParamState& into) {
    into.step(from.step());
    into.sum(copy_to_host(from.sum(), into.sum()));
  }
};
template <>
struct TorchOptimizerState<torch::optim::RMSprop> {
  static constexpr bool known = true;
  using ParamState = torch::optim::RMSpropParamState;
  using Options = torch::optim::RMSpropOptions;
  static void copy(const ParamState& from, ParamState& into) {
    into.step(from.step());
    into.square_avg(copy_to_host(from.square_avg(), into.square_avg()));
    into.momentum_buffer(copy_to_host(from.momentum_buffer(), into.momentum_buffer()));
    into.grad_avg(copy_to_host(from.grad_avg(), into.grad_avg()));
  }
};

// An optimizer's per-parameter state copied into host tensors kept from one snapshot to the next
// (an optimizer TorchOptimizerState knows): an optimizer of the same type over the same
// parameter groups (only their identity is read: the archive names parameters by it) whose state
// holds the copies, so that its own save() writes libtorch's layout with no copy of it here.
template <class Optimizer>
struct TorchOptimizerCopy {
  using State = TorchOptimizerState<Optimizer>;
  std::unique_ptr<Optimizer> optimizer;

  // Callers hold a NoGradGuard.
  void fill(Optimizer& from) {
    if (!optimizer)
      optimizer = std::make_unique<Optimizer>(
          from.param_groups(), static_cast<const typename State::Options&>(from.defaults()));
    // The groups again, for their options (a learning-rate schedule changes them) and in case
    // the user added one; copying a group copies tensor handles and clones the options.
    std::vector<torch::optim::OptimizerParamGroup>& groups = optimizer->param_groups();
    groups.clear();
    for (const torch::optim::OptimizerParamGroup& group : from.param_groups())
      groups.emplace_back(group);
    auto& copies = optimizer->state();
    const auto& states = from.state();
    std::vector<void*> gone;
    for (const auto& [key, copy] : copies)
      if (states.find(key) == states.end()) gone.push_back(key);
    for (void* key : gone) copies.erase(key);
    for (const auto& [key, state] : states) {
      std::unique_ptr<torch::optim::OptimizerParamState>& copy = copies[key];
      if (!copy) copy = std::make_unique<typename State::ParamState>();
      State::copy(static_cast<const typename State::ParamState&>(*state),
                  static_cast<typename State::ParamState&>(*copy));
    }
  }
  void save(torch::serialize::OutputArchive& archive) const { optimizer->save(archive); }
};

// The CPU generator's state (torch::manual_seed's generator: dropout, randperm, initializers).
inline torch::Tensor torch_cpu_rng_state() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}
// The CPU generator's state kept for a snapshot without a tensor: its engine and cached normal
// samples, copied on the training thread with no allocation; its tensor made by state(), on the
// thread that writes the snapshot.
struct TorchCpuRngCopy {
  at::mt19937 engine;
  std::optional<float> float_sample;
  std::optional<double> double_sample;

  void fill() {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    const std::lock_guard<std::mutex> lock(generator.mutex());
    auto* impl = generator.get<at::CPUGeneratorImpl>();
    engine = impl->engine();
    float_sample = impl->next_float_normal_sample();
    double_sample = impl->next_double_normal_sample();
  }
  torch::Tensor state() const {
    at::CPUGeneratorImpl copy;
    copy.set_engine(engine);
    copy.set_next_float_normal_sample(float_sample);
    copy.set_next_double_normal_sample(double_sample);
    return torch::Tensor(copy.get_state());
  }
};
inline void set_torch_cpu_rng_state(const torch::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// The state of a device's default generator (CUDA's: dropout and randint on the device), through
// ATen's hooks, so that a CPU-only libtorch compiles and links this; called only on such a device.
inline torch::Tensor torch_device_rng_state(const torch::Device& device) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  const std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}
inline void set_torch_device_rng_state(const torch::Device& device, const torch::Tensor& state) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  const std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Where the data stands at a step, as a checkpoint records it: the epoch, the offset of the
// step's global batch in that epoch's order, and what fixes the order (seed, global batch size).
struct TorchDataPosition {
  std::int64_t epoch = 0;
  std::int64_t offset = 0;
  std::int64_t seed = 0;  // the TensorBatches seed's bits
  std::int64_t batch_size = 0;

  static TorchDataPosition at(const TensorBatches& batches, std::int64_t step) {
    return {batches.epoch_of(step), batches.offset_of(step),
            static_cast<std::int64_t>(batches.seed()), batches.batch_size()};
  }
  void write(torch::serialize::OutputArchive& archive) const {
    archive.write("data_epoch", c10::IValue(epoch));
    archive.write("data_offset", c10::IValue(offset));
    archive.write("data_seed", c10::IValue(seed));
    archive.write("data_batch_size", c10::IValue(batch_size));
  }
};

}  // namespace runhooks::detail
