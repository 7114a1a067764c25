// expect: runhooks: the hook's after_create_session does not fit
// after_create_session receives the session, and the coordinator if it asks for it; a session
// of another type is an error.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct RestoreHook {
  void after_create_session(int step) { (void)step; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, RestoreHook{}};
  session.run();
}
