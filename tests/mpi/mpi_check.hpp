// A check for tests run under mpirun: a failed check prints the rank, file, line and condition;
// main() returns mpi_check_result(), non-zero on any rank that failed, so mpirun exits non-zero.
#pragma once

#include <mpi.h>

#include <cstdio>

inline int& mpi_check_failures() {
  static int failures = 0;
  return failures;
}

#define MPI_CHECK(condition)                                                                  \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      int rank_ = -1;                                                                         \
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);                                                  \
      std::fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", rank_, __FILE__, __LINE__,  \
                   #condition);                                                               \
      ++mpi_check_failures();                                                                 \
    }                                                                                         \
  } while (false)

// Every rank's verdict, printed once by rank 0; the return value for main().
inline int mpi_check_result(const char* test) {
  int failed = mpi_check_failures() > 0 ? 1 : 0, any = 0, rank = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::printf("%s: %s\n", test, any ? "FAILED" : "OK");
  return failed;
}
