// LambdaHook: a hook from lambdas for any subset of the five points, TensorFlow's call order for
// them, absent points costing nothing (no member at all), and the combined form.
// tests/compile_fail/lambda_hook_* check that a lambda that does not fit its point is the same
// error as a wrong member function.

#include <runhooks/coordinator.hpp>
#include <runhooks/hooks/lambda_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace {

struct Loss : runhooks::Key<float> {};
struct Rate : runhooks::Key<float> {};

struct Backend {
  std::int64_t step = 0;
  float rate = 0.0f;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 0.25f; }
  void feed(Rate, float r) { rate = r; }
};

}  // namespace

TEST_CASE("on_after_run: a one-point hook from a lambda") {
  int seen = 0;
  runhooks::MonitoredSession session{
      Backend{}, runhooks::on_after_run([&](auto& run_context, const auto&) {
        if (++seen == 3) run_context.request_stop();
      })};
  while (!session.should_stop()) session.run();
  CHECK(seen == 3);
  CHECK(session.raw_session().step == 3);
}

TEST_CASE("LambdaHook: all five points, in TensorFlow's order, with fetches and feeds") {
  std::vector<std::string> calls;
  float fetched = 0.0f;
  runhooks::LambdaHook hook{
      runhooks::on_begin([&] { calls.push_back("begin"); }),
      runhooks::on_after_create_session([&](auto& backend, const auto& coord) {
        calls.push_back("after_create_session@" + std::to_string(backend.step));
        CHECK_FALSE(coord.should_stop());
      }),
      runhooks::on_before_run([&](auto&) {
        calls.push_back("before_run");
        return runhooks::SessionRunArgs{runhooks::fetch<Loss>(), runhooks::feed<Rate>(0.5f)};
      }),
      runhooks::on_after_run([&](auto&, const auto& values) {
        calls.push_back("after_run");
        fetched = *values[Loss{}];
      }),
      runhooks::on_end([&](auto& backend) { calls.push_back("end@" + std::to_string(backend.step)); }),
  };
  {
    runhooks::MonitoredSession session{Backend{}, std::move(hook)};
    session.run();
    CHECK(session.raw_session().rate == 0.5f);
  }
  CHECK(calls == std::vector<std::string>{"begin", "after_create_session@0", "before_run",
                                          "after_run", "end@1"});
  CHECK(fetched == 0.25f);
}

TEST_CASE("LambdaHook: an absent point is no member at all, and costs nothing") {
  auto only_end = runhooks::on_end([](auto&) {});
  using OnlyEnd = decltype(only_end);
  CHECK(runhooks::HasEnd<OnlyEnd, Backend>);
  CHECK_FALSE(runhooks::HasBegin<OnlyEnd>);
  CHECK_FALSE(runhooks::detail::names_begin<OnlyEnd>);
  CHECK_FALSE(runhooks::detail::names_before_run<OnlyEnd>);
  CHECK_FALSE(runhooks::detail::names_after_run<OnlyEnd>);
  CHECK_FALSE(runhooks::detail::names_after_create_session<OnlyEnd>);
  // Captureless lambdas and absent points take no space.
  CHECK(std::is_empty_v<OnlyEnd>);
  int counter = 0;
  auto counting = runhooks::on_after_run([&counter](auto&, const auto&) { ++counter; });
  CHECK(sizeof(counting) == sizeof(int*));
}

TEST_CASE("LambdaHook: a coordinator taken as Coordinator& can stop the session") {
  runhooks::MonitoredSession session{
      Backend{}, runhooks::on_after_create_session([](auto&, runhooks::Coordinator& coord) {
        coord.request_stop();
      })};
  CHECK(session.should_stop());
}

TEST_CASE("LambdaHook: on_before_run may return nothing") {
  int before = 0;
  runhooks::MonitoredSession session{Backend{}, runhooks::on_before_run([&](auto&) { ++before; })};
  session.run();
  session.run();
  CHECK(before == 2);
}
