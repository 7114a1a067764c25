// expect: caller_fetches_produced_key<ValLoss, runhooks::EvaluationHook<
// A key only a hook produces is not the caller's to fetch: run()'s values come from the backend.
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

struct ValLoss : runhooks::Key<double> {};

struct Trainer {
  void run() {}
};

int main() {
  auto evaluate = [](Trainer&) { return runhooks::KeyValues<ValLoss>(0.5); };
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::EvaluationHook{runhooks::keys<ValLoss>, evaluate, {.every_n_steps = 10}}};
  session.run(runhooks::SessionRunArgs{runhooks::fetch<ValLoss>()});
}
