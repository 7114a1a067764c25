// Collective: the few operations runhooks' rules for a job of many processes (the stop vote, the
// chief-only hooks, the chief's state at start) need from the engine that connects the processes,
// so that each rule is written once for MPI and c10d alike.
#pragma once

#include <runhooks/detail/config.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <runhooks/error.hpp>

namespace runhooks {

// CollectiveRequest: a collective operation that was started and is not yet known to be complete.
//
// Minimal complete definition: default construction (no operation), moves, `test()`, `wait()`.
//
// Semantics, for a request `r` returned by a Collective's start_... member:
//   r.test()  never blocks; true once the operation is complete (and on a default-constructed or
//             finished request), after which r.wait() returns at once.
//   r.wait()  blocks until the operation is complete, writes its result into the buffer it was
//             started on, and leaves r finished; throws the engine's error_type if it failed (a
//             peer that died or did not take part within the engine's timeout).
// The buffer passed to start_... must stay valid until wait() returns (or the job ends).
template <class R>
concept CollectiveRequest = std::movable<R> && std::default_initializable<R> && requires(R& r) {
  { r.test() } -> std::same_as<bool>;
  r.wait();
};

// Collective: one process's handle on a group of processes that run the same program (the ranks
// 0 .. size()-1 of an MPI communicator or a c10d process group), offering just what runhooks'
// distributed rules use.
//
// Minimal complete definition: `error_type`, `request_type`, `rank()`, `size()`, `describe()`,
// `allreduce_max(values)`, `start_allreduce_max(values)`, `start_broadcast(bytes, max_wait)`,
// `broadcast(bytes)`, `barrier()`, `abandon(rule)`.
//
// Models: runhooks::MpiCollective (<runhooks/mpi/mpi_collective.hpp>, MPI_Allreduce and friends
// on a duplicate of a communicator), runhooks::C10dCollective
// (<runhooks/torch/distributed/c10d_collective.hpp>, a c10d process group such as Gloo's).
//
// Semantics, for a Collective `c` on every rank of the group. Every operation but rank(), size(),
// describe() and abandon() is collective: every rank calls the same operations in the same
// order, with spans of the same size; a blocking operation never matches a nonblocking one (MPI's
// rule, which the rules obey on every engine).
//   C::error_type            derived from runhooks::Error; what every failure below throws.
//   c.rank(), c.size()       this rank (0 is the chief) and the number of ranks; never change.
//   c.describe()             "rank R of N", the prefix of every error message about this rank.
//   c.allreduce_max(v)       v (a few std::int64_t) becomes the element-wise maximum of every
//                            rank's v; blocks until then. (A logical OR is the maximum of 0/1, a
//                            minimum the maximum of negated values: all the votes need.)
//   c.start_allreduce_max(v) the same, nonblocking: returns a CollectiveRequest, v holds the
//                            result after its wait().
//   c.start_broadcast(b, t)  rank 0's bytes b reach every rank's b, nonblocking. A rank that polls
//                            the request may wait for rank 0 up to t (a std::chrono duration,
//                            rank 0 may be slow to send): the engine must not fail the operation
//                            by its own timeout before t has passed.
//   c.broadcast(b)           rank 0's bytes b reach every rank's b; blocks; any size.
//   c.barrier()              returns once every rank has called it.
//   c.abandon(rule)          noexcept, not collective: this rank left `rule` (e.g. the stop vote)
//                            by an exception, so the other ranks may wait for it in a collective
//                            forever. The engine makes sure the job ends: at once (printing the
//                            rule and this rank), or, when an environment object will first report
//                            the exception that is unwinding, once it has.
// Failures of peers surface as C::error_type from the operations, within the engine's timeout
// (c10d: C10dOptions::timeout_secs; MPI: when the MPI library notices, usually at once since
// mpirun ends the job when a rank dies).
template <class C>
concept Collective =
    std::movable<C> && std::derived_from<typename C::error_type, Error> &&
    CollectiveRequest<typename C::request_type> &&
    requires(C& c, const C& cc, std::span<std::int64_t> values, std::span<std::byte> bytes,
             std::chrono::milliseconds max_wait, std::string_view rule) {
      { cc.rank() } -> std::same_as<int>;
      { cc.size() } -> std::same_as<int>;
      { cc.describe() } -> std::convertible_to<std::string>;
      c.allreduce_max(values);
      { c.start_allreduce_max(values) } -> std::same_as<typename C::request_type>;
      { c.start_broadcast(bytes, max_wait) } -> std::same_as<typename C::request_type>;
      c.broadcast(bytes);
      c.barrier();
      { c.abandon(rule) } noexcept;
    };

}  // namespace runhooks
