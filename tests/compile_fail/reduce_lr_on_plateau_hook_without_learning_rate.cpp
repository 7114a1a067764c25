// expect: backend_has_no_learning_rate<runhooks::ReduceLROnPlateauHook<ValLoss>, NoRateBackend>
// expect: the backend has no `double learning_rate() const` and `void set_learning_rate(double)`
// A hook that sets the learning rate, on a backend without one: one error naming the hook and
// the backend (runhooks::HasLearningRate).
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct ValLoss : runhooks::Key<double> {};

struct NoRateBackend {
  void run() {}
  double fetch(ValLoss) const { return 1.0; }
};

int main() {
  runhooks::MonitoredSession session{NoRateBackend{}, runhooks::ReduceLROnPlateauHook<ValLoss>()};
  session.run();
}
