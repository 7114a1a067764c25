// expect: runhooks::SessionRunArgs names the same fetch or feed twice
// Each key appears at most once in one SessionRunArgs.
#include <runhooks/session_run_args.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::SessionRunArgs args{runhooks::fetch<Loss>(), runhooks::fetch<Loss>(false)};
  (void)args;
}
