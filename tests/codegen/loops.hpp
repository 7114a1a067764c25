// What tests/codegen/loops.cpp measures: one backend, the hand-written loops a user would write
// without runhooks, and the hook sets the sessions use.
//
// Every loop is written once per configuration in its own `extern "C" [[gnu::noinline]]`
// function (see loops.cpp), so callgrind's --toggle-collect counts exactly one loop, and
// objdump finds it by an unmangled name.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include <runhooks/coordinator.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>

namespace codegen {

// The step body: one increment of a member and one volatile store, so the compiler can neither
// delete the loop nor fold the steps. Identical in every loop, hooked or hand-written.
inline volatile std::int64_t step_sink = 0;

struct CountingBackend {
  std::int64_t step = 0;
  void run() noexcept {
    ++step;
    step_sink = step;
  }
  std::int64_t global_step() const noexcept { return step; }
};

// The same with its global step in an atomic, as a backend sharing it with other threads has
// (SharedGlobalStep): every global_step() is a load the compiler may not merge with another.
struct AtomicStepBackend {
  std::atomic<std::int64_t> step{0};
  AtomicStepBackend() = default;
  AtomicStepBackend(AtomicStepBackend&& other) noexcept : step(other.step.load()) {}
  void run() noexcept {
    const std::int64_t next = step.load(std::memory_order_relaxed) + 1;
    step.store(next, std::memory_order_release);
    step_sink = next;
  }
  std::int64_t global_step() const noexcept { return step.load(std::memory_order_acquire); }
};

// The output of every StepCounterHook here: it records nothing, so that the rare path costs the
// same in the session and in the hand-written loop.
struct NullOutput {
  void record(std::string_view, double, std::int64_t) noexcept {}
};

// A user hook with a per-step callback: counts the steps it saw.
struct StepTallyHook {
  std::int64_t steps = 0;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) noexcept {
    ++steps;
  }
};

// A user hook with no per-step callback: only begin(), after_create_session() and end(). I
// tells the instances apart, so that a 64-hook session holds several distinct hook types.
inline volatile int lifecycle_sink = 0;
template <int I>
struct LifecycleHook {
  void begin() noexcept { lifecycle_sink = I; }
  template <class Backend>
  void after_create_session(Backend&) noexcept {
    lifecycle_sink = I + 1;
  }
  template <class Backend>
  void end(Backend&) noexcept {
    lifecycle_sink = I + 2;
  }
};

// A hook that takes the coordinator (to hand it to a thread that may stop the session): the
// session then checks the coordinator's atomic flag on every step.
struct CoordinatorHook {
  runhooks::Coordinator* coord = nullptr;
  template <class Backend>
  void after_create_session(Backend&, runhooks::Coordinator& c) noexcept {
    coord = &c;
  }
};

// --- Hand-written equivalents ---------------------------------------------------------------

// Makes the compiler treat *object as known to code it cannot see, as an object is once its
// address has been handed to any out-of-line function. The session is such an object: its
// constructor hands its members to the Coordinator (mutex, condition variable) and the hooks'
// rare paths receive `this`. An empty asm, so it costs nothing itself.
inline void publish(const void* object) noexcept { asm volatile("" : : "r"(object) : "memory"); }

// What the hand-written loop does when its trigger test fires: what StepCounterHook's own rare
// path does (SecondOrStepTimer, then the next trigger step), out of line, as the hook's is.
struct HandStepCounter {
  runhooks::SecondOrStepTimer<> timer;
  std::int64_t every_n_steps;
  std::int64_t next_check = INT64_MIN;
  std::int64_t last_global_step = INT64_MIN;
  NullOutput output;

  explicit HandStepCounter(std::int64_t n)
      : timer(runhooks::TimerOptions{.every_steps = n}), every_n_steps(n) {}

  [[gnu::noinline]] void check(std::int64_t global_step) {
    if (timer.should_trigger_for_step(global_step)) {
      const runhooks::TimerElapsed elapsed = timer.update_last_triggered_step(global_step);
      if (elapsed.secs && *elapsed.secs > 0.0)
        output.record("global_step/sec", static_cast<double>(*elapsed.steps) / *elapsed.secs,
                      global_step);
    }
    next_check = runhooks::detail::saturating_add(*timer.last_triggered_step(), every_n_steps);
  }
  [[gnu::noinline]] void warn_not_increased(std::int64_t global_step) {
    lifecycle_sink = static_cast<int>(global_step);
  }
};

// One step and the three tests StopAtStepHook and StepCounterHook make, rare paths out of line;
// like the hooks, the stop request takes effect after all tests ran. The global step is read
// once.
template <class Backend>
inline void hand_step(Backend& backend, HandStepCounter& counter, std::int64_t last_step,
                      bool& stop) {
    backend.run();
    const std::int64_t global_step = backend.global_step();
    bool stop_requested = false;
    if (global_step >= last_step) [[unlikely]]
      stop_requested = true;
    if (global_step >= counter.next_check) [[unlikely]]
      counter.check(global_step);
    if (global_step <= counter.last_global_step) [[unlikely]]
      counter.warn_not_increased(global_step);
    counter.last_global_step = global_step;
    if (stop_requested) [[unlikely]]
      stop = true;
}

// A hand-written trainer, as a user writes one without runhooks: the backend, the step to stop
// at, the loop's own stop flag (which its body may set) and the rate counter, in one object.
template <class Backend = CountingBackend>
struct HandTrainer {
  Backend backend;
  std::int64_t last_step;
  bool stop = false;
  HandStepCounter counter;

  HandTrainer(std::int64_t last, std::int64_t every_n_steps)
      : last_step(last), counter(every_n_steps) {}

  void step() { hand_step(backend, counter, last_step, stop); }
};

// A hand-written loop that runs a counted number of steps: the backend and the loop's own stop
// flag.
struct CountedTrainer {
  CountingBackend backend;
  bool stop = false;
};

// The bare minimum: the backend and the step to stop at.
struct BareTrainer {
  CountingBackend backend;
  std::int64_t last_step;
};

}  // namespace codegen
