// expect: runhooks: run() fetches a key the backend does not offer
// expect: backend_cannot_fetch<Accuracy, Trainer>
// The caller's fetch of a key no one offers names the key and the backend.
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct Loss : runhooks::Key<float> {};
struct Accuracy : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  float fetch(Loss) const { return 0.5f; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}};
  session.run(runhooks::SessionRunArgs{runhooks::fetch<Accuracy>()});
}
