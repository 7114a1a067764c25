// expect: key_produced_after_its_reader<ValLoss, runhooks::EarlyStoppingHook<ValLoss>, runhooks::EvaluationHook<
// expect: Move the reading hook after the producing one
// A hook that reads a produced metric must come after its producer, or it would never see the
// value of its step: the error names the key, the reader and the producer.
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct ValLoss : runhooks::Key<double> {};

struct Trainer {
  void run() {}
};

int main() {
  auto evaluate = [](Trainer&) { return runhooks::KeyValues<ValLoss>(0.5); };
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::EarlyStoppingHook<ValLoss>(),
      runhooks::EvaluationHook{runhooks::keys<ValLoss>, evaluate, {.every_n_steps = 10}}};
  session.run();
}
