// Staggered start of workers that share one global step, as TensorFlow's GlobalStepWaiterHook
// docstring suggests: worker k waits for global step int(K * log(k + 1)), so the chief (k = 0)
// starts at once and the others join one after another; a StopAtStepHook ends every worker at
// the same last step. The program checks what it claims and returns non-zero otherwise.

#include <runhooks/backends/shared_global_step.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stop_token>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr int worker_count = 4;
constexpr double stagger = 50.0;        // TensorFlow's K
constexpr std::int64_t last_step = 2000;

// What each worker saw; written by its own thread only, read after the threads are joined.
struct WorkerRecord {
  std::int64_t wait_until = 0;
  std::optional<std::int64_t> first_step;  // the global step just before its first own step
  std::int64_t steps = 0;
  std::optional<std::int64_t> stopped_at;  // the global step when its stop was requested
  int rates = 0;                           // StepCounterHook measurements (chief only)
  double last_rate = 0.0;
};

// One worker's view of the shared step: each run does a little work and adds one.
struct WorkerBackend {
  runhooks::SharedGlobalStep* shared;
  WorkerRecord* record;

  void run() {
    volatile double sink = 0.0;  // a little work, so the workers interleave
    for (int i = 0; i < 2000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
    const std::int64_t before = shared->increment() - 1;
    if (!record->first_step) record->first_step = before;
    ++record->steps;
  }
  std::int64_t global_step() const { return shared->load(); }
  // Makes the backend a runhooks::WaitableGlobalStep: the waiter wakes as soon as the step is
  // reached instead of polling.
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    std::chrono::steady_clock::time_point deadline) {
    return shared->wait_for_global_step(target, stop, deadline);
  }
};
static_assert(runhooks::WaitableGlobalStep<WorkerBackend>);

// Notes the global step when a hook earlier in the list asked to stop.
struct StopRecorder {
  WorkerRecord* record;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (run_context.stop_requested() && !record->stopped_at)
      record->stopped_at = run_context.session().global_step();
  }
};

void run_worker(int k, runhooks::SharedGlobalStep& shared, WorkerRecord& record) {
  record.wait_until = static_cast<std::int64_t>(stagger * std::log(k + 1.0));
  WorkerBackend backend{&shared, &record};
  if (k == 0) {
    auto rate = runhooks::CallbackOutput{[&record](std::string_view, double steps_per_sec,
                                                   std::int64_t) {
      ++record.rates;
      record.last_rate = steps_per_sec;
    }};
    runhooks::MonitoredSession session(
        backend, runhooks::GlobalStepWaiterHook(record.wait_until),
        runhooks::StepCounterHook({.every_n_steps = 200}, runhooks::SteadyClock{}, rate),
        runhooks::StopAtStepHook({.last_step = last_step}), StopRecorder{&record});
    runhooks::run_loop(session);
  } else {
    runhooks::MonitoredSession session(
        backend, runhooks::GlobalStepWaiterHook(record.wait_until),
        runhooks::StopAtStepHook({.last_step = last_step}), StopRecorder{&record});
    runhooks::run_loop(session);
  }
}

}  // namespace

int main() {
  runhooks::SharedGlobalStep shared;
  std::vector<WorkerRecord> records(worker_count);
  {
    std::vector<std::jthread> threads;
    // Start the last worker first, so the waits are real rather than won by start-up order.
    for (int k = worker_count - 1; k >= 0; --k)
      threads.emplace_back([k, &shared, &records] {
        run_worker(k, shared, records[static_cast<std::size_t>(k)]);
      });
  }

  bool ok = true;
  const auto claim = [&ok](bool holds, const char* what, int k) {
    if (!holds) {
      std::fprintf(stderr, "FAILED: worker %d: %s\n", k, what);
      ok = false;
    }
  };

  std::int64_t total_steps = 0;
  std::printf("worker  waits for  first step at  steps  stopped at\n");
  for (int k = 0; k < worker_count; ++k) {
    const WorkerRecord& r = records[static_cast<std::size_t>(k)];
    total_steps += r.steps;
    std::printf("%6d  %9lld  %13lld  %5lld  %10lld\n", k, static_cast<long long>(r.wait_until),
                static_cast<long long>(r.first_step.value_or(-1)),
                static_cast<long long>(r.steps),
                static_cast<long long>(r.stopped_at.value_or(-1)));
    claim(r.first_step.has_value(), "never ran a step", k);
    claim(r.first_step.value_or(-1) >= r.wait_until,
          "started before the shared step reached its threshold", k);
    claim(r.stopped_at.has_value(), "was not stopped by StopAtStepHook", k);
    claim(r.stopped_at.value_or(-1) >= last_step, "stopped before the last step", k);
  }
  claim(records[0].rates > 0 && records[0].last_rate > 0.0, "StepCounterHook measured nothing",
        0);
  claim(shared.load() == total_steps, "the shared step is not the sum of the workers' steps", -1);
  claim(shared.load() >= last_step, "the shared step ended below the last step", -1);

  std::printf("shared global step %lld (last_step %lld); chief measured %d rates, last %.0f "
              "steps/s\n",
              static_cast<long long>(shared.load()), static_cast<long long>(last_step),
              records[0].rates, records[0].last_rate);
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
