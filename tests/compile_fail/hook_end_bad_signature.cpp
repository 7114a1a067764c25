// expect: runhooks: the hook's end does not fit
// end() receives the session (TensorFlow: end(session)); one that takes nothing is an error.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct FinishHook {
  void end() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, FinishHook{}};
  session.run();
}
