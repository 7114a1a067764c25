// MpiStopVoteHook: one stop decision for every rank of an MPI job. A stop wanted on any rank (a
// hook, a signal, the coordinator, mpi_request_stop()) stops every rank after the same step,
// with every rank issuing the same sequence of collectives, so none is left waiting in one. The
// rule is StopVoteHook's (<runhooks/distributed/stop_vote_hook.hpp>) on an MpiCollective; this
// header gives it its MPI names.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <cstdint>
#include <utility>

#include <runhooks/distributed/stop_vote_hook.hpp>
#include <runhooks/mpi/mpi_collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>

namespace runhooks {

// Asks every rank to stop, through this process's MpiStopVoteHook: the ranks stop together after
// the step of its next vote. Async-signal-safe; callable from any thread. (cast_stop_vote().)
inline void mpi_request_stop() noexcept { cast_stop_vote(); }

// StopVoteOptions under its MPI name (errors say MpiStopVoteOptions::...).
struct MpiStopVoteOptions {
  // When the ranks vote: after every every_n_steps-th step, or, with 0, about every every_n_secs
  // seconds (the number of steps between votes follows the slowest rank's measured step time,
  // which each vote carries, so every rank computes the same schedule). A stop is agreed at most
  // one vote interval after it was asked for (two when pipelined).
  std::int64_t every_n_steps = 0;
  double every_n_secs = 0.01;
  // false: each vote is one blocking MPI_Allreduce. true: one MPI_Iallreduce in flight, started at
  // a vote step and completed at the next, whose steps the stop then waits for.
  bool pipelined = false;
  // By time, the votes' own time is kept to at most this fraction of the time spent stepping
  // (StopVoteOptions::max_overhead). Greater than 0, at most 1.
  double max_overhead = 0.01;

  // std::invalid_argument naming the option and its value for a negative every_n_steps, or an
  // every_n_secs that is not a duration greater than 0 or a max_overhead outside (0, 1] (when
  // used).
  const MpiStopVoteOptions& validate() const {
    StopVoteOptions(*this).validate("MpiStopVoteOptions");
    return *this;
  }
  operator StopVoteOptions() const noexcept {
    return {.every_n_steps = every_n_steps, .every_n_secs = every_n_secs, .pipelined = pipelined,
            .max_overhead = max_overhead};
  }
};

// The vote on MPI: StopVoteHook on an MpiCollective of `comm` (duplicated, so construction is
// collective). Put it last in the session on every rank, with the same options. A vote is one
// MPI_Allreduce of 24 bytes (MPI_Iallreduce when pipelined); see StopVoteHook for what stops
// every rank after the same step. A rank that leaves the session by an exception (no end()) ends
// the job: with an MpiEnvironment alive, the destructor leaves that to whoever reports the
// exception (mpi_run_or_abort, the terminate handler) or, if the program catches it, to
// ~MpiEnvironment, which aborts instead of finalizing; without one it calls mpi_abort_job at once.
// Ranks whose options differ get an MpiError from begin().
class MpiStopVoteHook : public StopVoteHook<MpiCollective> {
 public:
  explicit MpiStopVoteHook(MpiStopVoteOptions options = {}, MPI_Comm comm = MPI_COMM_WORLD)
      : StopVoteHook<MpiCollective>(MpiCollective((options.validate(), comm)), options,
                                    "MpiStopVoteHook"),
        mpi_options_(options) {}

  const MpiStopVoteOptions& options() const noexcept { return mpi_options_; }

 private:
  MpiStopVoteOptions mpi_options_;
};

// What a hook wrapped in MpiVoted sees as its run context (VotedRunContext).
template <class Ctx>
using MpiVotedRunContext = VotedRunContext<Ctx>;

// A hook whose stop requests go to the vote (Voted, under its MPI name): its
// run_context.request_stop() casts this rank's vote, so that all ranks stop together after the
// next vote rather than this rank alone now. For stop rules that one rank may trigger on its own
// (a NaN loss, early stopping on local data, a signal) under a vote that is not after every step.
// Costs nothing beyond the wrapped hook's own calls.
template <class Hook>
class MpiVoted : public Voted<Hook> {
 public:
  explicit MpiVoted(Hook hook) : Voted<Hook>(std::move(hook)) {}
};

}  // namespace runhooks
