// expect: runhooks::EvaluationHook: the evaluator must be callable as `evaluator(backend)` and return runhooks::KeyValues<Keys...> of the hook's keys
// An evaluator returning the keys in another order (or other keys) is named at compile time.
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct ValLoss : runhooks::Key<double> {};
struct ValAccuracy : runhooks::Key<double> {};

struct Trainer {
  void run() {}
};

int main() {
  auto evaluate = [](Trainer&) { return runhooks::KeyValues<ValAccuracy, ValLoss>(0.9, 0.5); };
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::EvaluationHook{runhooks::keys<ValLoss, ValAccuracy>, evaluate,
                                          {.every_n_steps = 10}}};
  session.run();
}
