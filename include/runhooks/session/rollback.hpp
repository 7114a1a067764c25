// A rollback: a hook's request that the session go back to its latest checkpoint, and the error
// when it cannot.
#pragma once

#include <runhooks/detail/config.hpp>

#include <exception>
#include <string>

#include <runhooks/error.hpp>

namespace runhooks {

// Thrown from a hook point (SpikeHook's on_spike = SpikeAction::rollback) to ask the session to
// go back to its latest checkpoint. A recoverable session (a MonitoredSession whose creator
// restores checkpoints: ChiefSessionCreator, make_training_session's) recovers from it as from a
// preemption, without asking its retry policy and without a delay: the backend is made again and
// restored from the latest checkpoint, the stateful hooks take the states saved with it, every
// after_create_session runs, and the run() that threw is run again on the restored backend. It
// is logged as a rollback:
//   runhooks: rolling back to the latest checkpoint: <what()>
// It is an AbortedError so that a session that does not recover (SingularMonitoredSession)
// raises it as it raises every lost backend: no rollback happened then.
class RollbackRequest : public AbortedError {
 public:
  using AbortedError::AbortedError;
};

// A rollback that found no checkpoint to go back to: the session's creator restored none (there
// is none yet in its directory, or it is a creator that restores no checkpoint). The session
// ends without a backend, as after a recovery that failed, and run() raises this.
class RollbackError : public Error {
 public:
  using Error::Error;
};

namespace detail {

inline bool is_rollback(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const RollbackRequest&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace detail

}  // namespace runhooks
