// expect: no_producer_of_key<ValAccuracy, runhooks::ReduceLROnPlateauHook<ValAccuracy>, Trainer>
// A metric nothing in the session produces is a compile error naming the hook, the key and the
// backend (Keras warns at run time and does nothing; Lightning raises at run time when strict).
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct ValLoss : runhooks::Key<double> {};
struct ValAccuracy : runhooks::Key<double> {};

struct Trainer {
  double rate = 0.1;
  void run() {}
  double fetch(ValLoss) const { return 0.5; }
  double learning_rate() const { return rate; }
  void set_learning_rate(double r) { rate = r; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::ReduceLROnPlateauHook<ValAccuracy>()};
  session.run();
}
