// expect: runhooks: a hook and the caller of run() feed the same input
// Feed conflicts stay compile errors with FeedFnHook (TensorFlow: 'Same tensor is fed by a
// SessionRunHook and user' at run time).
#include <runhooks/hooks/feed_fn_hook.hpp>
#include <runhooks/monitored_session.hpp>

struct X : runhooks::Key<float> {};

struct Trainer {
  void run() {}
  void feed(X, float) {}
};

int main() {
  runhooks::MonitoredSession session{
      Trainer{}, runhooks::FeedFnHook{[] { return runhooks::SessionRunArgs{runhooks::feed<X>(1.0f)}; }}};
  session.run(runhooks::SessionRunArgs{runhooks::feed<X>(2.0f)});
}
