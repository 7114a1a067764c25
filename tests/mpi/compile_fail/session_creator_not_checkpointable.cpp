// expect: runhooks::MpiSessionCreator sends the chief's state to the other ranks with the backend's save() and restore()
// The state goes from rank 0 to the others through Checkpointable: a backend without save() and
// restore() is a compile error naming what to add.
#include <runhooks/monitored_session.hpp>
#include <runhooks/mpi/mpi_session_creator.hpp>

#include <cstdint>

struct Backend {
  std::int64_t step = 0;
  void run() { ++step; }
};

int main() {
  runhooks::MonitoredSession session(runhooks::MpiSessionCreator([] { return Backend{}; }));
  session.run();
}
