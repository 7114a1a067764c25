// expect: runhooks: a hook is given a key the backend cannot fetch
// ProgressBarHook shows keys the backend fetches; one it lacks is named at compile time.
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Loss : runhooks::Key<float> {};

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::ProgressBarHook{runhooks::keys<Loss>}};
  session.run();
}
