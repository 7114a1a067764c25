// expect: runhooks: the hook's begin() does not fit
// begin() takes nothing; a lambda for it that wants an argument is a compile error.
#include <runhooks/hooks/lambda_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::on_begin([](int steps) { (void)steps; })};
}
