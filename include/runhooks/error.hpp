// The exceptions runhooks throws, mirroring TensorFlow's error classes.
#pragma once

#include <runhooks/detail/config.hpp>

#include <stdexcept>

namespace runhooks {

// Every exception runhooks throws derives from Error, so one handler catches them all.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The input is exhausted. Like TensorFlow's tf.errors.OutOfRangeError it ends a training loop
// cleanly: run_loop() treats it as the normal end and still call every end().
class OutOfRangeError : public Error {
 public:
  using Error::Error;
};

// The backend was lost mid-step (TensorFlow: tf.errors.AbortedError). A MonitoredSession
// built from a session creator re-creates its backend and replays the step.
class AbortedError : public Error {
 public:
  using Error::Error;
};

// The backend cannot be reached (TensorFlow: tf.errors.UnavailableError); recovered like
// AbortedError.
class UnavailableError : public Error {
 public:
  using Error::Error;
};

// A wait ran past its deadline (TensorFlow: tf.errors.DeadlineExceededError).
class DeadlineExceededError : public Error {
 public:
  using Error::Error;
};

// Thrown by StepContext::request_stop(), as TensorFlow raises StopIteration there; a clean end,
// like OutOfRangeError.
class StopIteration : public Error {
 public:
  using Error::Error;
};

// The session was used against its contract: run() after a stop, close() twice
// (TensorFlow raises RuntimeError for these).
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace runhooks
