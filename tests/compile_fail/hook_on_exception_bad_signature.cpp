// expect: runhooks: the hook's on_exception does not fit
// on_exception receives the session and the exception (Lightning: on_exception(trainer, module,
// exception)); one that takes only the exception is an error, never a handler silently skipped.
#include <exception>

#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct SaveOnCrashHook {
  void on_exception(const std::exception_ptr&) {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, SaveOnCrashHook{}};
  session.run();
}
