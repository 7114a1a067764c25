// Writing a hook: a class that defines some of the five hook points (begin,
// after_create_session, before_run, after_run, end). Each point is optional and found at compile
// time; a hook pays nothing for the points it leaves out.
#include <runhooks/runhooks.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>

struct Loss : runhooks::Key<float> {};

// Gradient descent on f(x) = (x - 3)^2: each step multiplies the loss by (1 - 2 lr)^2 = 0.81.
struct Trainer {
  float x = 0.0f;
  std::int64_t step = 0;
  void run() {
    x -= 0.05f * 2.0f * (x - 3.0f);
    ++step;
  }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return (x - 3.0f) * (x - 3.0f); }
};

// Early stopping: asks for the loss every n-th step and stops once it is below a threshold.
// The fetch goes through before_run rather than run_context.session().fetch(...) so that the
// session reads it once, after the step and before any after_run, and hands this hook only the
// values it asked for. Switching it off (fetch<Loss>(false)) skips the backend call on the
// other steps without changing the step's type.
struct StopBelowLoss {
  float threshold;
  std::int64_t every_n_steps = 1;

  auto before_run(auto& run_context) const {
    const std::int64_t next_step = run_context.session().global_step() + 1;
    return runhooks::SessionRunArgs{runhooks::fetch<Loss>(next_step % every_n_steps == 0)};
  }
  void after_run(auto& run_context, const auto& run_values) const {
    // An optional: empty on the steps where the fetch was off.
    if (const auto& loss = run_values[Loss{}]; loss && *loss < threshold)
      run_context.request_stop();  // read by the session after every hook's after_run
  }
};

// Bookends: begin() runs before the backend exists, end() after the last step of a clean exit.
struct Announce {
  bool ended = false;
  void begin() { std::printf("training starts\n"); }
  void end(auto& session) {
    std::printf("stopped at step %lld, loss %.5f\n",
                static_cast<long long>(session.global_step()), double{session.fetch(Loss{})});
    ended = true;
  }
};

int main() {
  constexpr float threshold = 1e-3f;
  constexpr std::int64_t every_n_steps = 5;

  // The expected stop, by a plain loop over a copy of the backend: the first multiple of 5
  // whose loss is below the threshold (9 * 0.81^s < 1e-3 first at s = 44, so step 45).
  std::int64_t expected = 0;
  for (Trainer copy; expected == 0;) {
    copy.run();
    if (copy.step % every_n_steps == 0 && copy.fetch(Loss{}) < threshold) expected = copy.step;
  }

  Announce announce;
  std::int64_t stopped_at = 0;
  {
    // Hooks are stored by value; std::ref keeps `announce` outside so we can read it after.
    // StopAtStepHook is a safety net: the example ends even if StopBelowLoss never fires.
    runhooks::MonitoredSession session{Trainer{}, std::ref(announce),
                                       StopBelowLoss{.threshold = threshold,
                                                     .every_n_steps = every_n_steps},
                                       runhooks::StopAtStepHook({.num_steps = 1000})};
    while (!session.should_stop()) session.run();
    stopped_at = session.raw_session().global_step();
  }  // Leaving the scope normally closes the session: this is where end() runs.

  std::printf("expected step %lld, stopped at %lld\n", static_cast<long long>(expected),
              static_cast<long long>(stopped_at));
  if (stopped_at != expected || expected != 45 || !announce.ended) {
    std::printf("FAILED\n");
    return 1;
  }
  return 0;
}
