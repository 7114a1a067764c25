// expect: runhooks: before_run must return void or runhooks::SessionRunArgs
// before_run returns void or SessionRunArgs{...}; any other result is an error.
#include <runhooks/monitored_session.hpp>

struct Trainer {
  void run() {}
};

struct CountingHook {
  int calls = 0;
  int before_run(auto&) { return ++calls; }
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, CountingHook{}};
  session.run();
}
