// Writing a backend: what MonitoredSession asks of the thing that runs the steps.
//
// A backend is any class with `void run()`; that is the whole minimal definition. Everything
// else is optional and found by the compiler: `global_step()` for the step-based hooks,
// `fetch(Key)` for each value it can produce and `feed(Key, value)` for each input it accepts.
// Nothing derives from a base class and nothing is virtual.
#include <runhooks/runhooks.hpp>

#include <cstdint>
#include <cstdio>

// The smallest backend the step-based hooks accept: a step and a counter.
struct Counter {
  std::int64_t steps = 0;
  void run() { ++steps; }
  std::int64_t global_step() const { return steps; }
};

static_assert(runhooks::Backend<Counter>);
static_assert(runhooks::HasGlobalStep<Counter>);

// Keys name values by type; the type carried is Key's argument.
struct Loss : runhooks::Key<float> {};
struct LearningRate : runhooks::Key<float> {};

// A backend with a value to fetch and an input to feed: gradient descent on f(x) = x^2.
class Quadratic {
 public:
  void run() {
    x_ -= learning_rate_ * 2.0f * x_;  // x <- x - lr * f'(x)
    ++step_;
  }
  std::int64_t global_step() const { return step_; }

  float fetch(Loss) const { return x_ * x_; }  // read after run(), before any after_run
  void feed(LearningRate, float lr) { learning_rate_ = lr; }  // applied before run()

 private:
  float x_ = 1.0f;
  float learning_rate_ = 0.25f;
  std::int64_t step_ = 0;
};

// What hooks may ask of it, checked where it is declared rather than deep in a session.
static_assert(runhooks::Backend<Quadratic>);
static_assert(runhooks::CanFetch<Quadratic, Loss>);
static_assert(runhooks::CanFeed<Quadratic, LearningRate>);
static_assert(!runhooks::CanFeed<Quadratic, Loss>);  // fetch-only: feeding it does not compile
static_assert(!runhooks::CanFetch<Counter, Loss>);

int main() {
  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  };

  {
    // The session owns the backend; raw_session() reaches it without running any hook.
    runhooks::MonitoredSession session{Counter{}, runhooks::StopAtStepHook({.num_steps = 5})};
    runhooks::run_loop(session);
    std::printf("Counter ran %lld steps\n",
                static_cast<long long>(session.raw_session().global_step()));
    expect(session.raw_session().global_step() == 5, "Counter stops after 5 steps");
  }

  {
    runhooks::MonitoredSession session{Quadratic{}, runhooks::StopAtStepHook({.num_steps = 3})};
    // The caller feeds and fetches through run(): at lr = 0.25 each step halves x, so the loss
    // x^2 is divided by 4.
    const float after_one = *session.run(runhooks::SessionRunArgs{runhooks::fetch<Loss>()})[Loss{}];
    // lr = 0.5 lands on the minimum in one step.
    const float after_two = *session.run(runhooks::SessionRunArgs{
        runhooks::fetch<Loss>(), runhooks::feed<LearningRate>(0.5f)})[Loss{}];
    std::printf("Quadratic loss after step 1: %g, after step 2: %g\n", double{after_one},
                double{after_two});
    expect(after_one == 0.25f, "one step at lr 0.25 quarters the loss");
    expect(after_two == 0.0f, "a step at lr 0.5 reaches the minimum");
    runhooks::run_loop(session);
    expect(session.raw_session().global_step() == 3, "Quadratic stops after 3 steps");
  }

  return failures == 0 ? 0 : 1;
}
