// FinalOpsHook: TensorFlow's FinalOpsHookTest (case J92 of tf-semantics.md §3) with its numbers,
// and the session rules around it: final values only after a clean end, never after an error.

#include <runhooks/error.hpp>
#include <runhooks/hooks/feed_fn_hook.hpp>
#include <runhooks/hooks/final_ops_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "support/fakes.hpp"

using runhooks::FeedFnHook;
using runhooks::FinalOpsHook;

namespace {

struct Four : runhooks::Key<int> {};                      // constant(4)
struct Values : runhooks::Key<std::vector<int>> {};       // constant([1, 6, 3, 5, 2, 4])
struct Placeholder : runhooks::Key<std::vector<float>> {};  // placeholder, fed
struct ReadOps : runhooks::Key<std::int64_t> {};          // iterator.get_next() of range(1)
struct X : runhooks::Key<float> {};                       // placeholder x
struct Y : runhooks::Key<float> {};                       // y = x + 1

struct Backend {
  std::int64_t step = 0;
  std::int64_t next_element = 0;  // Dataset.range(1): one element, then OutOfRangeError
  std::optional<std::vector<float>> placeholder;
  float x = 0.0f, pending_x = 0.0f;
  int fetches = 0;

  void run() {
    x = pending_x;
    ++step;
  }
  std::int64_t global_step() const { return step; }
  int fetch(Four) {
    ++fetches;
    return 4;
  }
  std::vector<int> fetch(Values) const { return {1, 6, 3, 5, 2, 4}; }
  std::vector<float> fetch(Placeholder) const {
    if (!placeholder) throw std::runtime_error("You must feed a value for placeholder tensor");
    return *placeholder;
  }
  void feed(Placeholder, std::vector<float> v) { placeholder = std::move(v); }
  std::int64_t fetch(ReadOps) {
    if (next_element >= 1) throw runhooks::OutOfRangeError("End of sequence");
    return next_element++;
  }
  void feed(X, float v) { pending_x = v; }
  float fetch(Y) const { return x + 1.0f; }
};

}  // namespace

TEST_CASE("J92 test_final_ops_is_scalar_tensor: 4") {
  FinalOpsHook hook{runhooks::keys<Four>};
  Backend backend;
  CHECK_FALSE(hook.final_ops_values().has_value());
  hook.end(backend);
  REQUIRE(hook.final_ops_values().has_value());
  CHECK((*hook.final_ops_values())[Four{}] == 4);
}

TEST_CASE("J92 test_final_ops_is_tensor: [1, 6, 3, 5, 2, 4]") {
  FinalOpsHook hook{runhooks::keys<Values>};
  Backend backend;
  hook.end(backend);
  CHECK((*hook.final_ops_values())[Values{}] == std::vector<int>{1, 6, 3, 5, 2, 4});
}

TEST_CASE("J92 test_final_ops_with_dictionary: the fed [4, -3] comes back") {
  FinalOpsHook hook{runhooks::keys<Placeholder>,
                    runhooks::SessionRunArgs{runhooks::feed<Placeholder>({4.0f, -3.0f})}};
  Backend backend;
  hook.end(backend);
  CHECK((*hook.final_ops_values())[Placeholder{}] == std::vector<float>{4.0f, -3.0f});
}

TEST_CASE("J92 test_final_ops_triggers_out_of_range_error: logged, and re-raised") {
  fakes::LogCapture capture;
  FinalOpsHook hook{runhooks::keys<ReadOps>};
  Backend backend;
  CHECK(backend.fetch(ReadOps{}) == 0);  // session.run(read_ops)
  CHECK_THROWS_WITH_AS(hook.end(backend), "End of sequence", runhooks::OutOfRangeError);
  CHECK(capture.contains("dependency back to some input source"));
  CHECK_FALSE(hook.final_ops_values().has_value());
}

TEST_CASE("FinalOpsHook in a session: values after a clean end, none after an error") {
  SUBCASE("clean end: run_loop, then close() calls end()") {
    FinalOpsHook hook{runhooks::keys<Four, Y>};
    runhooks::MonitoredSession session{Backend{}, std::ref(hook),
                                       FeedFnHook{[] { return runhooks::SessionRunArgs{runhooks::feed<X>(2.0f)}; }}};
    for (int i = 0; i < 3; ++i) session.run();
    CHECK(session.raw_session().fetches == 0);  // nothing fetched per step
    session.close();
    REQUIRE(hook.final_ops_values().has_value());
    CHECK((*hook.final_ops_values())[Four{}] == 4);
    CHECK((*hook.final_ops_values())[Y{}] == 3.0f);
  }
  SUBCASE("an error leaves the loop: no end(), no final fetch") {
    FinalOpsHook hook{runhooks::keys<Four>};
    struct Fails : Backend {
      void run() { throw std::runtime_error("step failed"); }
    };
    {
      runhooks::MonitoredSession session{Fails{}, std::ref(hook)};
      CHECK_THROWS_AS(runhooks::run_loop(session), std::runtime_error);
      CHECK(session.raw_session().fetches == 0);
    }
    CHECK_FALSE(hook.final_ops_values().has_value());
  }
}
