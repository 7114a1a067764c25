// GradientAllreduce: a TorchBackend's gradients averaged over the ranks of a data-parallel job
// after every backward(), as PyTorch's DistributedDataParallel does: flattened into buckets of at
// most bucket_cap_mb, each summed over the ranks by one allreduce of an engine, then divided by
// the number of ranks.
//
// Use: the fourth template argument of runhooks::TorchBackend, given to its constructor before
// the optimizer's arguments; the engine is C10dAllreduceSum
// (<runhooks/torch/distributed/c10d_gradient_allreduce.hpp>, Gloo under torchrun) or
// MpiAllreduceSum (<runhooks/torch/distributed/mpi_gradient_allreduce.hpp>, MPI under mpirun):
//
//   using Sync = runhooks::GradientAllreduce<runhooks::C10dAllreduceSum>;
//   runhooks::TorchBackend<Model, torch::optim::SGD, runhooks::CrossEntropyLoss, Sync> backend(
//       model, runhooks::TensorBatches(x, y, 32, seed, {.rank = r, .num_replicas = n}),
//       Sync(runhooks::C10dAllreduceSum(env.process_group())), torch::optim::SGDOptions(0.05));
//
// A TorchBackend without it (the default NoGradientSync) runs the step it always ran: the policy
// is a template parameter, and its default's after_backward is empty.
//
// Not done: overlapping the allreduce with the backward pass (DDP's autograd hooks, which start a
// bucket's allreduce as soon as its last gradient is ready). It pays when there are several
// buckets; a model under bucket_cap_mb (the digits MLP: 19 KB) has one, ready when backward()
// ends, so there is nothing to overlap.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <runhooks/detail/checked.hpp>

namespace runhooks {

struct GradientAllreduceOptions {
  // The most bytes of gradients in one allreduce (DDP's bucket_cap_mb, default 25 MiB). A
  // parameter larger than that gets a bucket of its own. Greater than 0, at most 1e6 (MiB).
  double bucket_cap_mb = 25.0;

  // std::invalid_argument naming the option and its value otherwise.
  const GradientAllreduceOptions& validate() const {
    if (!(bucket_cap_mb > 0.0 && bucket_cap_mb <= 1e6))
      throw std::invalid_argument(
          "runhooks: GradientAllreduceOptions::bucket_cap_mb must be greater than 0 and at most "
          "1e6 (MiB), got " + detail::format_number(bucket_cap_mb) + ".");
    return *this;
  }
  std::int64_t bucket_cap_bytes() const {
    return static_cast<std::int64_t>(bucket_cap_mb * 1024.0 * 1024.0);
  }
};

// GradientAllreduceEngine: the one collective data parallelism needs.
//
// Minimal complete definition: `size()`, `allreduce_sum(tensor)`.
//
// Semantics, on every rank of the group, in the same order: e.size() is the number of ranks;
// e.allreduce_sum(t), for a contiguous float32 CPU tensor t of the same size on every rank,
// replaces t by the element-wise sum of every rank's t, the same bits on every rank, and blocks
// until then; a failure (a dead peer, the engine's timeout) throws the engine's error, naming
// this rank.
//
// Models: runhooks::C10dAllreduceSum, runhooks::MpiAllreduceSum.
template <class E>
concept GradientAllreduceEngine = std::movable<E> && requires(E& e, const E& ce, torch::Tensor& t) {
  { ce.size() } -> std::convertible_to<int>;
  e.allreduce_sum(t);
};

// The TorchBackend policy (see the top of this file). On the first after_backward, the model's
// parameters that require a gradient (all float32 on the CPU, else std::invalid_argument naming
// the parameter) are assigned to buckets in reverse order of model.parameters() (DDP's order,
// about the order backward() produces them), and a flat float32 tensor is allocated per bucket.
// Then every call, per bucket: allreduce_sum, divide by size(). The first call copies each
// gradient into its slice of the flat tensor (zeros for a parameter without a gradient) and then
// makes the slice the parameter's gradient (DDP's gradient_as_bucket_view): zero_grad(), which
// TorchBackend calls instead of the optimizer's, zeroes the buckets, and backward() accumulates
// into them in place, so later steps copy nothing (a gradient that is no longer its slice, set
// by the program, is copied in again and replaced). No allocation per step. Costs, per step, a
// zeroing and a division of every bucket and one allreduce per bucket. Move-only when the engine
// is; every rank's model must have the same parameters in the same order.
template <GradientAllreduceEngine Engine>
class GradientAllreduce {
 public:
  explicit GradientAllreduce(Engine engine, GradientAllreduceOptions options = {})
      : engine_(std::move(engine)), options_(options.validate()) {}

  void after_backward(torch::nn::Module& model) {
    const auto start = std::chrono::steady_clock::now();
    const torch::NoGradGuard no_grad;
    if (buckets_.empty()) build(model);
    for (Bucket& bucket : buckets_) {
      for (Slot& slot : bucket.slots) {
        const torch::Tensor& grad = slot.parameter.grad();
        if (grad.is_same(slot.view)) continue;  // backward() accumulated into the bucket
        if (grad.defined()) slot.view.copy_(grad);
        else slot.view.zero_();
      }
      engine_.allreduce_sum(bucket.flat);
      bucket.flat.div_(divisor_);
      // The averaged gradient is the bucket's slice from now on (DDP's gradient_as_bucket_view).
      for (Slot& slot : bucket.slots)
        if (!slot.parameter.grad().is_same(slot.view)) slot.parameter.mutable_grad() = slot.view;
    }
    ++calls_;
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // Called by TorchBackend instead of the optimizer's zero_grad(): once the buckets exist, every
  // gradient is a view of its bucket, so zeroing the buckets zeroes the gradients in place and the
  // next backward() accumulates into them, with no copy into the bucket or back. Before the first
  // after_backward, the optimizer's own zero_grad().
  template <class Optimizer>
  void zero_grad(Optimizer& optimizer) {
    if (buckets_.empty()) {
      optimizer.zero_grad();
      return;
    }
    const torch::NoGradGuard no_grad;
    for (Bucket& bucket : buckets_) bucket.flat.zero_();
  }

  // The bytes of each bucket (empty before the first after_backward).
  std::vector<std::int64_t> bucket_bytes() const {
    std::vector<std::int64_t> bytes;
    for (const Bucket& bucket : buckets_) bytes.push_back(bucket.flat.numel() * 4);
    return bytes;
  }
  // How many after_backward calls, and the seconds spent in them (copies and allreduces).
  std::int64_t calls() const noexcept { return calls_; }
  double seconds() const noexcept { return seconds_; }

  Engine& engine() noexcept { return engine_; }
  const GradientAllreduceOptions& options() const noexcept { return options_; }

 private:
  struct Slot {
    torch::Tensor parameter;
    torch::Tensor view;  // the parameter's slice of the bucket's flat tensor, in its shape
  };
  struct Bucket {
    torch::Tensor flat;
    std::vector<Slot> slots;
  };

  void build(torch::nn::Module& model) {
    const std::vector<torch::Tensor> parameters = model.parameters();
    const std::int64_t cap = options_.bucket_cap_bytes();
    std::vector<std::vector<std::size_t>> groups;
    std::int64_t bytes = 0;
    for (std::size_t i = parameters.size(); i-- > 0;) {
      const torch::Tensor& p = parameters[i];
      if (!p.requires_grad()) continue;
      if (p.scalar_type() != torch::kFloat || !p.device().is_cpu())
        throw std::invalid_argument(
            "runhooks::GradientAllreduce: parameter " + std::to_string(i) + " of the model is " +
            std::string(c10::toString(p.scalar_type())) + " on " + p.device().str() +
            "; only float32 parameters on the CPU are averaged");
      const std::int64_t size = p.numel() * 4;
      if (groups.empty() || (bytes > 0 && bytes + size > cap)) {
        groups.emplace_back();
        bytes = 0;
      }
      groups.back().push_back(i);
      bytes += size;
    }
    for (const std::vector<std::size_t>& group : groups) {
      std::int64_t numel = 0;
      for (std::size_t i : group) numel += parameters[i].numel();
      Bucket bucket{torch::zeros({numel}, torch::kFloat), {}};
      std::int64_t offset = 0;
      for (std::size_t i : group) {
        const torch::Tensor& p = parameters[i];
        bucket.slots.push_back({p, bucket.flat.narrow(0, offset, p.numel()).view(p.sizes())});
        offset += p.numel();
      }
      buckets_.push_back(std::move(bucket));
    }
    divisor_ = torch::full({}, static_cast<float>(engine_.size()), torch::kFloat);
  }

  Engine engine_;
  GradientAllreduceOptions options_;
  std::vector<Bucket> buckets_;
  torch::Tensor divisor_;
  std::int64_t calls_ = 0;
  double seconds_ = 0.0;
};

}  // namespace runhooks
