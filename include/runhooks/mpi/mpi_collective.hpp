// MpiCollective: MPI as a runhooks::Collective engine, on a duplicate of a communicator, so that
// the generic rules (<runhooks/distributed/...>) run on MPI ranks.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <runhooks/distributed/collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>

namespace runhooks {

// A model of runhooks::Collective: every operation is one MPI call on a duplicate of the
// communicator (runhooks' collectives never interleave with the program's). Construction and
// destruction are collective (MPI_Comm_dup, MPI_Comm_free). Move-only; use it from the thread
// that runs the session (MPI_THREAD_FUNNELED).
//   allreduce_max        MPI_Allreduce(MPI_IN_PLACE, MPI_INT64_T, MPI_MAX)
//   start_allreduce_max  MPI_Iallreduce, likewise; the request is an MPI_Request
//   start_broadcast      MPI_Ibcast of MPI_BYTE from rank 0; max_wait is not needed (MPI has no
//                        timeout of its own: the caller's polling enforces it)
//   broadcast            MPI_Bcast, in pieces of 1 GiB (an int count)
//   barrier              MPI_Barrier
//   abandon              with an MpiEnvironment alive: ~MpiEnvironment aborts the job instead of
//                        finalizing, after the exception has been reported; without one:
//                        mpi_abort_job at once
// describe() is "rank R of N" of MPI_COMM_WORLD, as every MPI error of runhooks says.
class MpiCollective {
 public:
  using error_type = MpiError;

  class request_type {
   public:
    request_type() noexcept = default;
    request_type(request_type&& other) noexcept
        : request_(std::exchange(other.request_, MPI_REQUEST_NULL)) {}
    request_type& operator=(request_type&& other) noexcept {
      request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
      return *this;
    }

    bool test() {
      if (request_ == MPI_REQUEST_NULL) return true;
      int done = 0;
      detail::mpi_check(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return done != 0;
    }
    void wait() { detail::mpi_check(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait"); }

   private:
    friend class MpiCollective;
    MPI_Request request_ = MPI_REQUEST_NULL;
  };

  explicit MpiCollective(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  std::string describe() const { return detail::mpi_who(); }

  void allreduce_max(std::span<std::int64_t> values) {
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, values.data(), count(values.size()),
                                    MPI_INT64_T, MPI_MAX, comm_.get()),
                      "MPI_Allreduce");
  }
  request_type start_allreduce_max(std::span<std::int64_t> values) {
    request_type request;
    detail::mpi_check(MPI_Iallreduce(MPI_IN_PLACE, values.data(), count(values.size()),
                                     MPI_INT64_T, MPI_MAX, comm_.get(), &request.request_),
                      "MPI_Iallreduce");
    return request;
  }
  template <class Rep, class Period>
  request_type start_broadcast(std::span<std::byte> bytes, std::chrono::duration<Rep, Period>) {
    request_type request;
    detail::mpi_check(
        MPI_Ibcast(bytes.data(), count(bytes.size()), MPI_BYTE, 0, comm_.get(), &request.request_),
        "MPI_Ibcast");
    return request;
  }
  void broadcast(std::span<std::byte> bytes) {
    constexpr std::size_t piece = std::size_t{1} << 30;
    for (std::size_t at = 0; at < bytes.size(); at += piece)
      detail::mpi_check(MPI_Bcast(bytes.data() + at, count(std::min(piece, bytes.size() - at)),
                                  MPI_BYTE, 0, comm_.get()),
                        "MPI_Bcast");
  }
  void barrier() { detail::mpi_check(MPI_Barrier(comm_.get()), "MPI_Barrier"); }

  void abandon(std::string_view rule) noexcept {
    if (detail::mpi_environments > 0) {
      detail::mpi_vote_left_by_exception = true;
    } else {
      mpi_abort_job(std::string(rule) +
                    ": the session ended without end() (by an exception?) while the other "
                    "ranks may wait for this one in a stop vote");
    }
  }

  MPI_Comm get() const noexcept { return comm_.get(); }

 private:
  static int count(std::size_t n) {
    if (n > static_cast<std::size_t>(INT32_MAX))
      throw MpiError("runhooks: " + detail::mpi_who() + ": " + std::to_string(n) +
                     " elements are more than one MPI call can take");
    return static_cast<int>(n);
  }

  detail::MpiComm comm_;
};

static_assert(Collective<MpiCollective>);

}  // namespace runhooks
