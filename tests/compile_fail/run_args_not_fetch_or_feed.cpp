// expect: runhooks::SessionRunArgs takes only runhooks::fetch<K>() and runhooks::feed<K>(value) items
// SessionRunArgs holds Fetch and Feed items only; a bare key or value is an error.
#include <runhooks/session_run_args.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::SessionRunArgs args{runhooks::fetch<Loss>(), Loss{}};
  (void)args;
}
