// MpiChiefOnly: a hook that runs on the chief (rank 0) only, as TensorFlow's chief_only_hooks: the
// rule of ChiefOnly (<runhooks/distributed/chief_only.hpp>), with the chief found from an MPI
// communicator.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <utility>

#include <runhooks/distributed/chief_only.hpp>
#include <runhooks/mpi/mpi_environment.hpp>

namespace runhooks {

// Wraps a hook that only the chief should run: checkpoint saving, summaries, step-rate logs
// (TensorFlow's MonitoredTrainingSession gives these to the chief alone). Every rank builds the
// same session type; on the other ranks each call of the wrapped hook is skipped (one test of a
// flag per hook point), and a before_run that fetches returns its fetches switched off, so no
// rank computes what it would not use. A wrapped hook may not feed the backend: the other ranks
// would miss the feed (a compile error).
template <class Hook>
class MpiChiefOnly : public detail::chief_only_base<MpiChiefOnly<Hook>, Hook> {
 public:
  // The chief is rank 0 of comm.
  explicit MpiChiefOnly(Hook hook, MPI_Comm comm = MPI_COMM_WORLD)
      : MpiChiefOnly(std::move(hook), MpiEnvironment::rank(comm) == 0) {}
  MpiChiefOnly(Hook hook, bool is_chief)
      : detail::chief_only_base<MpiChiefOnly<Hook>, Hook>(std::move(hook), is_chief) {}
};

namespace detail {
template <class Hook>
inline constexpr bool is_mpi_chief_only<MpiChiefOnly<Hook>> = true;
}  // namespace detail

}  // namespace runhooks
