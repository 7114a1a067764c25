// MpiSessionCreator: TensorFlow's chief and worker session creators for an MPI job. Rank 0, the
// chief, creates its backend and restores or initializes it; every other rank waits for it, as
// WorkerSessionCreator does, and receives the chief's state by broadcast (no shared file system):
// the protocol of <runhooks/distributed/chief_state_hook.hpp> on an MpiCollective.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <utility>

#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/distributed/chief_state_hook.hpp>
#include <runhooks/mpi/mpi_collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/session_creator.hpp>

namespace runhooks {

struct MpiSessionOptions {
  // How long a worker waits for the chief's state before giving up with an MpiError
  // (TensorFlow's WorkerSessionCreator: max_wait_secs = 7200). At least 0, at most 1e9 s.
  double max_wait_secs = 7200.0;

  const MpiSessionOptions& validate() const {
    detail::checked_secs("MpiSessionOptions::max_wait_secs", max_wait_secs);
    return *this;
  }
};

namespace detail {

// The one error for a backend that cannot be sent; the instantiation note names it.
template <class Backend>
struct check_sendable_backend {
  static_assert(Checkpointable<Backend>,
                "runhooks::MpiSessionCreator sends the chief's state to the other ranks with the "
                "backend's save() and restore(): add `void save(const std::filesystem::path& "
                "prefix) const` and `void restore(const std::filesystem::path& prefix)` to the "
                "backend type named in this instantiation (see "
                "<runhooks/checkpoint/checkpointable.hpp>).");
  static constexpr bool value = true;
};

}  // namespace detail

// A session creator for every rank of the communicator. Inner is a session creator (typically a
// ChiefSessionCreator restoring the latest checkpoint of a directory on rank 0's disk) or a
// factory; every rank calls its create_session(), but only rank 0 its initialize(). Then rank 0
// saves the state of its backend (Checkpointable::save, into a private temporary directory) and
// broadcasts the files; every other rank restores them into its fresh backend. So every rank
// starts from the chief's state: the checkpoint it restored, or the factory's initialization
// (random weights drawn once). An error on the chief is sent to the workers, and every rank
// throws (the chief its own error, a worker an MpiError quoting it).
//
// Workers wait for the chief at most max_wait_secs (polling a nonblocking broadcast every
// millisecond), then throw an MpiError naming the wait: TensorFlow's WorkerSessionCreator.
//
// Never recovers (policy NoRecovery): re-creating the backend on one rank would break the
// collective sequence of all. A lost backend ends the job, and a restart resumes every rank from
// the chief's last checkpoint.
template <class Inner>
class MpiSessionCreator {
 public:
  using inner_type = detail::source_of_t<Inner, NoRecovery>;
  static_assert(SessionCreatorType<inner_type>,
                "runhooks::MpiSessionCreator wraps a session creator or a factory returning a "
                "backend.");
  using backend_type = typename inner_type::backend_type;
  static_assert(detail::check_sendable_backend<backend_type>::value);

  explicit MpiSessionCreator(Inner inner, MpiSessionOptions options = {},
                             MPI_Comm comm = MPI_COMM_WORLD)
      : inner_(std::move(inner)), options_(options.validate()), collective_(comm),
        chief_(collective_.rank() == 0) {}

  backend_type create_session() { return inner_.create_session(); }

  void initialize(backend_type& backend) {
    detail::share_chief_state(backend, collective_, options_.max_wait_secs,
                              "MpiSessionOptions::max_wait_secs", [&] {
      if constexpr (requires { inner_.initialize(backend); }) inner_.initialize(backend);
    });
  }

  const NoRecovery& policy() const noexcept { return policy_; }

  // Rank 0 of the communicator: it restores, saves checkpoints and writes summaries.
  bool is_chief() const noexcept { return chief_; }
  inner_type& inner() noexcept { return inner_; }
  const MpiSessionOptions& options() const noexcept { return options_; }

 private:
  inner_type inner_;
  MpiSessionOptions options_;
  MpiCollective collective_;
  bool chief_;
  [[no_unique_address]] NoRecovery policy_;
};

template <class Inner>
MpiSessionCreator(Inner) -> MpiSessionCreator<Inner>;
template <class Inner>
MpiSessionCreator(Inner, MpiSessionOptions) -> MpiSessionCreator<Inner>;
template <class Inner>
MpiSessionCreator(Inner, MpiSessionOptions, MPI_Comm) -> MpiSessionCreator<Inner>;

}  // namespace runhooks
