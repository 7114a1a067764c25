// expect: runhooks: a hook is given a key the backend cannot fetch
// LoggingTensorHook logs keys the backend fetches; one it lacks is named at compile time.
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Loss : runhooks::Key<float> {};
struct Accuracy : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  float fetch(Loss) const { return 0.5f; }
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::LoggingTensorHook{runhooks::keys<Loss, Accuracy>, {.every_n_iter = 10}}};
  session.run();
}
