// MpiAllreduceSum: the gradient allreduce of a data-parallel TorchBackend over MPI (under
// mpirun): runhooks::GradientAllreduce's engine. Needs both MPI and libtorch.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <climits>
#include <cstdint>
#include <string>

#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/torch/distributed/gradient_allreduce.hpp>

namespace runhooks {

// A model of GradientAllreduceEngine: allreduce_sum is MPI_Allreduce(MPI_IN_PLACE, MPI_FLOAT,
// MPI_SUM) on the bucket's flat CPU tensor, on a duplicate of the communicator (never interleaved
// with the program's collectives, nor with runhooks' stop vote, which has its own). Construction
// and destruction are collective (MPI_Comm_dup, MPI_Comm_free); move-only. MPI does not promise
// the same bits on every rank for every algorithm; Open MPI's allreduce of MPI_FLOAT gives them
// (train_digits_ddp's test compares every rank's parameters byte for byte).
class MpiAllreduceSum {
 public:
  explicit MpiAllreduceSum(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {}

  int size() const { return comm_.size(); }

  void allreduce_sum(at::Tensor& flat) {
    if (flat.numel() > INT_MAX)
      throw MpiError("runhooks: " + detail::mpi_who() + ": a gradient bucket of " +
                     std::to_string(flat.numel()) +
                     " floats is more than one MPI call takes; lower "
                     "GradientAllreduceOptions::bucket_cap_mb");
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, flat.mutable_data_ptr(),
                                    static_cast<int>(flat.numel()), MPI_FLOAT, MPI_SUM,
                                    comm_.get()),
                      "MPI_Allreduce (gradients)");
  }

  MPI_Comm get() const noexcept { return comm_.get(); }

 private:
  detail::MpiComm comm_;
};

static_assert(GradientAllreduceEngine<MpiAllreduceSum>);

}  // namespace runhooks
