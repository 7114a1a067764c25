// expect: runhooks: the hook has a member function
// expect: `onException`, which looks like a misspelt `on_exception`
// expect: check_near_misses<SaveOnCrashHook, true>
// `onException` (camelCase) for on_exception, runhooks' sixth hook point (issue 27): without the
// check it would never be called, and the crash would pass unsaved.
#include <exception>

#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct SaveOnCrashHook {
  int crashes = 0;
  void begin() {}
  void onException(auto&, const std::exception_ptr&) { ++crashes; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, SaveOnCrashHook{}};
  session.run();
}
