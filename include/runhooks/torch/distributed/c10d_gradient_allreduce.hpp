// C10dAllreduceSum: the gradient allreduce of a data-parallel TorchBackend on a c10d process
// group (Gloo's, from C10dEnvironment, under torchrun): runhooks::GradientAllreduce's engine.
#pragma once

#include <runhooks/detail/config.hpp>

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <runhooks/torch/distributed/c10d_collective.hpp>
#include <runhooks/torch/distributed/gradient_allreduce.hpp>
#include <runhooks/torch/distributed/torchrun_environment.hpp>

namespace runhooks {

// A model of GradientAllreduceEngine: allreduce_sum is one c10d allreduce (ReduceOp::SUM) of the
// bucket's flat CPU tensor, in place, waited for. Gloo's ring leaves the same bits on every
// rank. A handle: copies share the backend (the process group every rule of runhooks may also
// use: its collectives run in the order they were issued, all from the session's thread). A
// failure is a C10dError naming this rank and c10d's message: at once when a peer died, after
// the group's timeout (C10dOptions::timeout_secs) when one hangs.
class C10dAllreduceSum {
 public:
  explicit C10dAllreduceSum(c10::intrusive_ptr<c10d::Backend> backend)
      : backend_(std::move(backend)), tensors_(1) {}

  int size() const { return backend_->getSize(); }

  void allreduce_sum(at::Tensor& flat) {
    tensors_[0] = flat;
    try {
      c10d::AllreduceOptions options;
      options.reduceOp = c10d::ReduceOp::SUM;
      backend_->allreduce(tensors_, options)->wait();
    } catch (const std::exception& e) {
      throw C10dError("runhooks: rank " + std::to_string(backend_->getRank()) + " of " +
                      std::to_string(size()) + ": the gradient allreduce failed: " +
                      detail::c10d_message(e));
    }
  }

 private:
  c10::intrusive_ptr<c10d::Backend> backend_;
  std::vector<at::Tensor> tensors_;  // c10d takes a vector: kept, not made per step
};

static_assert(GradientAllreduceEngine<C10dAllreduceSum>);

}  // namespace runhooks
