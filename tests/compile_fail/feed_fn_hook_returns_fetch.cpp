// expect: runhooks::FeedFnHook: feed_fn must return runhooks::SessionRunArgs of feeds only
// FeedFnHook feeds; a function that returns a fetch belongs in another hook.
#include <runhooks/hooks/feed_fn_hook.hpp>

struct Loss : runhooks::Key<float> {};

int main() {
  runhooks::FeedFnHook hook{[] { return runhooks::SessionRunArgs{runhooks::fetch<Loss>()}; }};
  (void)hook;
}
