// A plain sleep for recovery's back-off, without <thread>: on POSIX it is nanosleep(), which
// <time.h> declares at a fraction of <thread>'s compile time.
#pragma once

#if defined(_WIN32)
#include <chrono>
#include <thread>
#else
#include <cerrno>
#include <time.h>
#endif

namespace runhooks::detail {

// Sleeps for `secs` seconds (0 <= secs <= max_duration_secs, checked by the caller), resuming
// after signals.
inline void sleep_secs(double secs) {
  if (!(secs > 0.0)) return;
#if defined(_WIN32)
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
#else
  timespec left{};
  left.tv_sec = static_cast<time_t>(secs);
  left.tv_nsec = static_cast<long>((secs - static_cast<double>(left.tv_sec)) * 1e9);
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
#endif
}

}  // namespace runhooks::detail
