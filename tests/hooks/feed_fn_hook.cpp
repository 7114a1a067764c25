// FeedFnHook: TensorFlow's FeedFnHookTest (case J92 of tf-semantics.md §3) with its number, and
// a feed function called before every step. tests/compile_fail/feed_fn_hook_* check that feed
// conflicts stay compile errors and that the function returns feeds only.

#include <runhooks/hooks/feed_fn_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>

using runhooks::FeedFnHook;

namespace {

struct X : runhooks::Key<float> {};  // placeholder x
struct Y : runhooks::Key<float> {};  // y = x + 1

struct Backend {
  std::int64_t step = 0;
  float x = 0.0f, pending_x = 0.0f;
  void run() {
    x = pending_x;
    ++step;
  }
  std::int64_t global_step() const { return step; }
  void feed(X, float v) { pending_x = v; }
  float fetch(Y) const { return x + 1.0f; }
};

}  // namespace

TEST_CASE("J92 FeedFnHook test_feeding_placeholder: x=1.0 makes y=x+1 return 2") {
  runhooks::MonitoredSession session{
      Backend{}, FeedFnHook{[] { return runhooks::SessionRunArgs{runhooks::feed<X>(1.0f)}; }}};
  CHECK(*session.run(runhooks::SessionRunArgs{runhooks::fetch<Y>()})[Y{}] == 2.0f);
}

TEST_CASE("FeedFnHook calls its function before every step") {
  int calls = 0;
  runhooks::MonitoredSession session{
      Backend{}, FeedFnHook{[&] {
        ++calls;
        return runhooks::SessionRunArgs{runhooks::feed<X>(static_cast<float>(calls))};
      }}};
  for (int i = 0; i < 5; ++i) session.run();
  CHECK(calls == 5);
  CHECK(session.raw_session().x == 5.0f);
  // A stateless function adds nothing to the session.
  auto one = [] { return runhooks::SessionRunArgs{runhooks::feed<X>(1.0f)}; };
  static_assert(sizeof(FeedFnHook<decltype(one)>) == 1);
}
