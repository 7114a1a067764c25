// expect: hook_key_not_fetchable<runhooks::SpikeHook<Loss>, Loss, Trainer>
// SpikeHook watches a loss the backend fetches; a loss it cannot fetch is named at compile time.
#include <runhooks/hooks/spike_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct Loss : runhooks::Key<double> {};

struct Trainer {
  void run() {}
};

int main() {
  runhooks::MonitoredSession session{Trainer{}, runhooks::SpikeHook<Loss>()};
  session.run();
}
