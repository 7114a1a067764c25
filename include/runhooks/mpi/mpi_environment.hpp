// MpiEnvironment: MPI's start and end for a runhooks program, the rank and size, and the one
// answer to a rank that fails: report the error with its rank, then MPI_Abort the whole job so
// that no other rank waits forever in a collective for it.
#pragma once

#include <runhooks/detail/config.hpp>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include <runhooks/detail/describe_exception.hpp>
#include <runhooks/error.hpp>

namespace runhooks {

// An MPI call failed, or the ranks disagree on a runhooks protocol (the chief never sent the
// initial state, two ranks built different sessions). The message names the rank.
class MpiError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline constinit int mpi_environments = 0;  // MpiEnvironment objects alive in this process
// Set by an MpiStopVoteHook whose session ended by an exception before end() (through
// MpiCollective::abandon), so that ~MpiEnvironment aborts the job rather than finalize while
// other ranks wait for this one.
inline constinit bool mpi_vote_left_by_exception = false;

inline int mpi_world_rank() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// "rank 3 of 4" (of MPI_COMM_WORLD), or "a process outside MPI" before MPI_Init.
inline std::string mpi_who() {
  const int rank = mpi_world_rank();
  if (rank < 0) return "a process outside MPI";
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return "rank " + std::to_string(rank) + " of " + std::to_string(size);
}

// Throws MpiError naming the call, MPI's own message and the rank, unless rc is MPI_SUCCESS.
// (MPI_COMM_WORLD and its duplicates abort on errors by default, MPI_ERRORS_ARE_FATAL; this
// matters for communicators whose error handler returns.)
inline void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  throw MpiError("runhooks: " + std::string(call) + " failed on " + mpi_who() + ": " +
                 std::string(text, static_cast<std::size_t>(length)));
}

// A duplicate of a communicator, freed with it: runhooks' own collectives and windows never
// interleave with the program's on the same communicator (the usual rule for MPI libraries).
// Move-only; creating and freeing are collective over the communicator.
class MpiComm {
 public:
  MpiComm() noexcept = default;
  explicit MpiComm(MPI_Comm parent) { mpi_check(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup"); }
  MpiComm(MpiComm&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  MpiComm& operator=(MpiComm&& other) noexcept {
    if (this != &other) {
      free();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    }
    return *this;
  }
  ~MpiComm() { free(); }

  MPI_Comm get() const noexcept { return comm_; }
  explicit operator bool() const noexcept { return comm_ != MPI_COMM_NULL; }
  int rank() const {
    int r = 0;
    mpi_check(MPI_Comm_rank(comm_, &r), "MPI_Comm_rank");
    return r;
  }
  int size() const {
    int s = 0;
    mpi_check(MPI_Comm_size(comm_, &s), "MPI_Comm_size");
    return s;
  }

 private:
  void free() noexcept {
    if (comm_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace detail

// Prints "runhooks: rank R of N: <what>; aborting the MPI job" to stderr and calls MPI_Abort on
// MPI_COMM_WORLD with `code`: mpirun then ends every rank and exits non-zero. Outside MPI (before
// MPI_Init or after MPI_Finalize) it calls std::abort().
[[noreturn]] inline void mpi_abort_job(std::string_view what, int code = 1) noexcept {
  std::fprintf(stderr, "runhooks: %s: %.*s; aborting the MPI job\n", detail::mpi_who().c_str(),
               static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  if (detail::mpi_world_rank() >= 0) MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

// Runs body() and returns what it returns. An exception leaving it is printed with this rank
// ("runhooks: rank 2 of 4: error: <what()>; aborting the MPI job") and ends the whole job with
// MPI_Abort: the other ranks may be waiting for this one in a collective (a stop vote, the
// backend's gradient allreduce), and only an abort frees them.
template <class Body>
decltype(auto) mpi_run_or_abort(Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (...) {
    mpi_abort_job("error: " +
                  detail::without_own_prefix(detail::describe_current_exception(), detail::mpi_who()));
  }
}

// MPI for the life of the object: MPI_Init_thread unless MPI is already initialized (then
// MPI_Finalize is left to whoever initialized it), MPI_Finalize at the end. runhooks calls MPI
// only from the thread that runs the session, so MPI_THREAD_FUNNELED is enough; ask for more if
// the program's own threads call MPI. Also makes std::terminate (an exception nobody caught)
// print the exception with this rank and abort the whole job, since a rank that dies while the
// others wait in a collective would otherwise hang them, or leave mpirun to report only a signal.
class MpiEnvironment {
 public:
  MpiEnvironment(int& argc, char**& argv, int required_thread_level = MPI_THREAD_FUNNELED) {
    int initialized = 0;
    detail::mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      int provided = 0;
      detail::mpi_check(MPI_Init_thread(&argc, &argv, required_thread_level, &provided),
                        "MPI_Init_thread");
      owns_ = true;
      if (provided < required_thread_level)
        mpi_abort_job("MPI_Init_thread provided thread level " + std::to_string(provided) +
                      ", below the required " + std::to_string(required_thread_level));
    }
    previous_terminate_ = std::set_terminate(&on_terminate);
    ++detail::mpi_environments;
  }
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  ~MpiEnvironment() {
    --detail::mpi_environments;
    if (detail::mpi_vote_left_by_exception)
      mpi_abort_job("a session with an MpiStopVoteHook was left by an exception before end(), and "
                    "the other ranks may wait for this one in a stop vote");
    std::set_terminate(previous_terminate_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }

  static int rank(MPI_Comm comm = MPI_COMM_WORLD) {
    int r = 0;
    detail::mpi_check(MPI_Comm_rank(comm, &r), "MPI_Comm_rank");
    return r;
  }
  static int size(MPI_Comm comm = MPI_COMM_WORLD) {
    int s = 0;
    detail::mpi_check(MPI_Comm_size(comm, &s), "MPI_Comm_size");
    return s;
  }
  // Rank 0 is the chief (TensorFlow's task 0): it restores, saves checkpoints, writes summaries.
  static bool is_chief(MPI_Comm comm = MPI_COMM_WORLD) { return rank(comm) == 0; }

 private:
  [[noreturn]] static void on_terminate() noexcept {
    mpi_abort_job(std::current_exception()
                      ? "terminate called after an uncaught exception: " +
                            detail::without_own_prefix(detail::describe_current_exception(),
                                                       detail::mpi_who())
                      : std::string("terminate called without an active exception"));
  }

  bool owns_ = false;
  std::terminate_handler previous_terminate_ = nullptr;
};

}  // namespace runhooks
