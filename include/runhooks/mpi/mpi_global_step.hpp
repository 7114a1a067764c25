// MpiGlobalStep: a global step shared by every rank of an MPI communicator, for asynchronous
// workers as in TensorFlow's parameter-server training; the cross-process SharedGlobalStep.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <stop_token>

#include <runhooks/detail/checked.hpp>
#include <runhooks/distributed/poll_global_step.hpp>
#include <runhooks/mpi/mpi_environment.hpp>

namespace runhooks {

struct MpiGlobalStepOptions {
  // While wait_for_global_step() waits, it reads the step with a poll that starts at 10 µs and
  // doubles up to this interval, so a waiter wakes at most about this long (plus one RMA read)
  // after the step is reached. Each poll is one RMA read of rank 0's memory: raise it for jobs
  // of many ranks that wait long. Greater than 0, at most 1e9 s.
  double max_poll_interval_secs = 0.0002;

  const MpiGlobalStepOptions& validate() const {
    detail::checked_secs("MpiGlobalStepOptions::max_poll_interval_secs", max_poll_interval_secs,
                         0.0, /*min_exclusive=*/true);
    return *this;
  }
};

// One 64-bit counter in an MPI RMA window on rank 0 of the communicator, reached by passive
// target: every access is one MPI_Fetch_and_op (with MPI_SUM to add, MPI_NO_OP to read) or one
// MPI_Accumulate (MPI_REPLACE, to store), then MPI_Win_flush, in one lock_all epoch opened for
// the counter's life. These are MPI's atomic RMA operations: an MPI_Get racing with another
// rank's MPI_Fetch_and_op would be a conflicting access (MPI-3.1 §11.7), so reads use
// MPI_Fetch_and_op with MPI_NO_OP, which is as cheap.
//
// Per step a worker pays one RMA operation, its increment, which also returns the new value:
// cached() (what a backend's global_step() returns) is then the step as of this rank's last
// access, TensorFlow's "stale read" of the global step, and costs nothing. load() reads the
// current value (one RMA operation).
//
// Construction and destruction are collective over the communicator (MPI_Win_allocate,
// MPI_Win_free). Not thread-safe: use it from the thread that runs the session (runhooks needs
// only MPI_THREAD_FUNNELED). Progress: with Open MPI on one machine the window is shared memory
// (osc/sm) and needs no help from rank 0; across machines, osc/rdma uses the network's atomics,
// while osc/pt2pt (networks without RDMA) serves a request only when rank 0 calls into MPI,
// which a rank 0 that steps does at least once per step.
class MpiGlobalStep {
 public:
  explicit MpiGlobalStep(MPI_Comm comm = MPI_COMM_WORLD, std::int64_t start = 0,
                         MpiGlobalStepOptions options = {})
      : comm_(comm), options_(options.validate()) {
    const bool root = comm_.rank() == 0;
    detail::mpi_check(MPI_Win_allocate(root ? MPI_Aint{sizeof(std::int64_t)} : MPI_Aint{0},
                                       static_cast<int>(sizeof(std::int64_t)), MPI_INFO_NULL,
                                       comm_.get(), &base_, &window_),
                      "MPI_Win_allocate");
    detail::mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_), "MPI_Win_lock_all");
    if (root) store(start);
    detail::mpi_check(MPI_Barrier(comm_.get()), "MPI_Barrier");
    cached_ = start;
    rma_operations_ = 0;
  }
  MpiGlobalStep(const MpiGlobalStep&) = delete;
  MpiGlobalStep& operator=(const MpiGlobalStep&) = delete;

  // Collective: every rank destroys its MpiGlobalStep (MPI_Win_free), before MPI_Finalize.
  ~MpiGlobalStep() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }

  // Adds `by` and returns the new value (one RMA operation).
  std::int64_t increment(std::int64_t by = 1) {
    std::int64_t previous = 0;
    detail::mpi_check(MPI_Fetch_and_op(&by, &previous, MPI_INT64_T, 0, 0, MPI_SUM, window_),
                      "MPI_Fetch_and_op");
    flush();
    cached_ = previous + by;
    return cached_;
  }

  // The current value (one RMA operation).
  std::int64_t load() {
    std::int64_t unused = 0, value = 0;
    detail::mpi_check(MPI_Fetch_and_op(&unused, &value, MPI_INT64_T, 0, 0, MPI_NO_OP, window_),
                      "MPI_Fetch_and_op");
    flush();
    cached_ = value;
    return value;
  }

  // Sets the value (one RMA operation), e.g. to a restored step; other ranks see it on their next
  // access.
  void store(std::int64_t value) {
    detail::mpi_check(
        MPI_Accumulate(&value, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_REPLACE, window_),
        "MPI_Accumulate");
    flush();
    cached_ = value;
  }

  // The value this rank saw last (its last increment, load, store or wait), with no
  // communication: at most one step of this rank old, plus whatever the other ranks added since.
  std::int64_t cached() const noexcept { return cached_; }

  // Blocks until the value is at least target, stop is requested, or the deadline passes, and
  // returns the value read last (less than target unless reached). Polls with load(), starting
  // at 10 µs and doubling up to max_poll_interval_secs (poll_global_step). Makes a backend that
  // forwards to it a runhooks::WaitableGlobalStep, so GlobalStepWaiterHook wakes within about one
  // poll interval.
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    std::chrono::steady_clock::time_point deadline) {
    return poll_global_step(*this, target, stop, deadline,
                            std::chrono::duration<double>(options_.max_poll_interval_secs));
  }

  // RMA operations this rank has issued since construction: one per increment, load and store.
  std::int64_t rma_operations() const noexcept { return rma_operations_; }

  MPI_Comm communicator() const noexcept { return comm_.get(); }

 private:
  void flush() {
    detail::mpi_check(MPI_Win_flush(0, window_), "MPI_Win_flush");
    ++rma_operations_;
  }

  detail::MpiComm comm_;
  MpiGlobalStepOptions options_;
  std::int64_t* base_ = nullptr;
  MPI_Win window_ = MPI_WIN_NULL;
  std::int64_t cached_ = 0;
  std::int64_t rma_operations_ = 0;
};

}  // namespace runhooks
