// expect: runhooks::LoggingTensorHook prints numbers, bools, strings and 1-D arrays of numbers
// The default line prints what numpy would; a value it cannot print needs a formatter.
#include <string>
#include <vector>

#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Words : runhooks::Key<std::vector<std::string>> {};

struct Trainer {
  void run() {}
  std::vector<std::string> fetch(Words) const { return {"a", "b"}; }
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::LoggingTensorHook{runhooks::keys<Words>, {.every_n_iter = 10}}};
  session.run();
}
