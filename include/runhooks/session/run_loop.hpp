// run_loop: TensorFlow's `with MonitoredSession(...) as s: while not s.should_stop(): body()`.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/error.hpp>

namespace runhooks {

// Runs body until the session should stop; OutOfRangeError or StopIteration ends the loop
// cleanly. Then closes the session, calling every end(). Any other exception closes the session
// without end() and propagates. Session is a MonitoredSession or a SingularMonitoredSession,
// whose friend this is.
template <class Session, class Body>
void run_loop(Session& session, Body&& body) {
  try {
    while (!session.should_stop()) body();
  } catch (const OutOfRangeError&) {
  } catch (const StopIteration&) {
  } catch (...) {
    session.close_logging_errors(false, "after an exception");
    throw;
  }
  session.close();
}

template <class Session>
void run_loop(Session& session) {
  run_loop(session, [&] { session.run(); });
}

}  // namespace runhooks
