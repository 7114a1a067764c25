// CheckpointError: what saving, reading or restoring a checkpoint throws.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/error.hpp>

namespace runhooks {

// A checkpoint could not be written, read or restored. The message names the file or
// directory and the cause ("runhooks: writing /ckpt/.model.ckpt-12.tmp-…: File too large").
// Not a preemption error: a MonitoredSession does not recover from it, run() or close() raises it.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace runhooks
