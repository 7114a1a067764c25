// expect: runhooks: the hook's after_run does not fit
// A lambda for after_run that takes only the run context is the error a member function with
// that signature gives, never a callback silently skipped.
#include <runhooks/hooks/lambda_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{},
                                     runhooks::on_after_run([](auto& run_context) { (void)run_context; })};
  session.run();
}
