// mpi_make_training_session: TensorFlow's MonitoredTrainingSession (make_training_session) on
// every rank of an MPI job: is_chief from the rank, the chief's state sent to the other ranks,
// and one stop decision for all of them.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <optional>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/distributed/chief_state_hook.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/mpi/mpi_collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_session_creator.hpp>
#include <runhooks/mpi/mpi_stop_vote_hook.hpp>
#include <runhooks/training_session.hpp>

namespace runhooks {

// What the MPI side of mpi_make_training_session takes.
struct MpiTrainingOptions {
  MpiSessionOptions session{};  // max_wait_secs: how long the other ranks wait for the chief
  MpiStopVoteOptions vote{};    // the rhythm of the stop vote
};

// Sends the chief's state to the other ranks when the session is created: ChiefStateHook
// (<runhooks/distributed/chief_state_hook.hpp>) on an MpiCollective of `comm`, waiting at most
// MpiSessionOptions::max_wait_secs. In after_create_session, after the chief's session creator
// restored its checkpoint and before any step (see MpiSessionCreator, which does the same from
// the session creator). Collective: every rank's session has it. A second creation (a recovery,
// which would happen on one rank alone) is an MpiError: an MPI job does not recover one rank; it
// ends, and its rerun resumes. A backend that is not Checkpointable keeps its factory's state on
// every rank.
class MpiChiefStateHook : public ChiefStateHook<MpiCollective> {
 public:
  explicit MpiChiefStateHook(MpiSessionOptions options = {}, MPI_Comm comm = MPI_COMM_WORLD)
      : ChiefStateHook<MpiCollective>(MpiCollective((options.validate(), comm)),
                                      options.max_wait_secs, "MpiSessionOptions::max_wait_secs") {}
};

// make_training_session(options, factory, args...) for every rank of MPI_COMM_WORLD:
//   - is_chief is rank 0 (options.is_chief is ignored); the chief restores the latest checkpoint
//     of checkpoint_dir, on its own disk, and runs the chief-only and default hooks;
//   - the other ranks do not read checkpoint_dir (no shared file system is assumed): they receive
//     the chief's state as the session is created (MpiChiefStateHook), waiting at most
//     mpi.session.max_wait_secs;
//   - SignalStopHook (options.stop_on_signals) is wrapped in MpiVoted, and MpiStopVoteHook comes
//     last, so a signal to any rank stops every rank after the same step.
// The session has the same type on every rank (make_training_session's Role::runtime: the
// chief-only hooks cost one test of a flag per point on the other ranks). A chief that fails
// before sending its state (a corrupt checkpoint) leaves its session by an exception, which ends
// the job (MpiStopVoteHook's rule) rather than leave the others waiting max_wait_secs.
template <BackendFactory Factory, class... Args>
auto mpi_make_training_session(TrainingSessionOptions options, const MpiTrainingOptions& mpi,
                               Factory factory, Args... args) {
  options.validate();
  mpi.vote.validate();
  const bool stop_on_signals = options.stop_on_signals;
  options.is_chief = MpiEnvironment::rank() == 0;
  if (!options.is_chief) options.checkpoint_dir = {};
  options.stop_on_signals = false;  // through the vote instead
  using VotedSignals = MpiVoted<SignalStopHook>;
  // MpiChiefStateHook first among the caller's hooks: on the other ranks every hook that runs
  // sees the chief's state in its after_create_session (StopAtStepHook's num_steps counts from it).
  // Only the chief-only and default hooks come before it, and they run on the chief alone.
  return make_training_session<Role::runtime>(
      options, std::move(factory), MpiChiefStateHook(mpi.session), std::move(args)...,
      Conditional<VotedSignals>(stop_on_signals
                                    ? std::optional<VotedSignals>(VotedSignals(SignalStopHook()))
                                    : std::nullopt),
      MpiStopVoteHook(mpi.vote));
}

}  // namespace runhooks
