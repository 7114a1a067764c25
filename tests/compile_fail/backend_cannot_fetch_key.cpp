// expect: runhooks: a hook reads a key that neither the backend fetches nor a hook declared before it produces
// expect: no_producer_of_key<Accuracy, AccuracyHook, Trainer>
// Fetching a key needs `value_type fetch(Key) const` on the backend.
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct Loss : runhooks::Key<float> {};
struct Accuracy : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  float fetch(Loss) const { return 0.5f; }
};

struct AccuracyHook {
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::fetch<Accuracy>()}; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, AccuracyHook{}};
  session.run();
}
