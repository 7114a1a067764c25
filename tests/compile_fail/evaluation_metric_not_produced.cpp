// expect: no_producer_of_key<ValAccuracy, runhooks::EarlyStoppingHook<ValAccuracy>, Trainer>
// expect: runhooks: a hook reads a key that neither the backend fetches nor a hook declared before it produces
// A metric nothing in the session produces is a compile error naming the metric and the hook
// that reads it (Lightning: "could not find the monitored key" at run time; Keras warns).
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct ValLoss : runhooks::Key<double> {};
struct ValAccuracy : runhooks::Key<double> {};

struct Trainer {
  void run() {}
};

int main() {
  auto evaluate = [](Trainer&) { return runhooks::KeyValues<ValLoss>(0.5); };
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::EvaluationHook{runhooks::keys<ValLoss>, evaluate, {.every_n_steps = 10}},
      runhooks::EarlyStoppingHook<ValAccuracy>()};
  session.run();
}
