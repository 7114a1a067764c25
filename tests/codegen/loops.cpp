// The loops whose instructions per step tests/codegen/count_instructions.py counts, each in its
// own unmangled, never-inlined function: `loops STEPS [NAME...]` runs the named loops (all by
// default) for STEPS steps each. The step count comes from the command line, so no loop can be
// folded at compile time.
//
// The hand-written loops are what a user would write without runhooks, doing the same work as
// the session they are compared with, with the same rules: rare paths out of line, tests marked
// [[unlikely]]. A session polls its Coordinator's std::atomic<bool> only while someone holds the
// coordinator (a hook whose after_create_session takes it, or a caller of coordinator()); none
// of the sessions here does, so the loops doing the same work are the `_noatomic` ones. The
// variants reading the external std::atomic<bool> `external_stop` (relaxed) are what a loop that
// can be stopped from another thread costs, reported for information.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include <runhooks/coordinator.hpp>
#include <runhooks/monitored_session.hpp>

#include "loops.hpp"

using namespace codegen;
using runhooks::GlobalStepWaiterHook;
using runhooks::MonitoredSession;
using runhooks::StepCounterHook;
using runhooks::StepCounterOptions;
using runhooks::StopAtStepHook;
using runhooks::StopAtStepOptions;

// Another thread could set it; nothing here does.
std::atomic<bool> external_stop{false};

namespace {
constexpr std::int64_t every_n_steps = 1000;  // count_instructions.py uses multiples of this
constexpr double every_n_secs = 1.0;

using Counter = StepCounterHook<runhooks::SteadyClock, NullOutput>;

Counter counter_every_n_steps() {
  return Counter(StepCounterOptions{.every_n_steps = every_n_steps});
}
Counter counter_every_n_secs() { return Counter(StepCounterOptions{.every_n_secs = every_n_secs}); }
StopAtStepHook stop_at(std::int64_t last_step) {
  return StopAtStepHook(StopAtStepOptions{.last_step = last_step});
}
}  // namespace

extern "C" {

// --- Loops that end after a number of steps the caller counts --------------------------------

// Hand-written: counts its steps, and stops early when its own flag or the external one is set.
[[gnu::noinline]] void hand_counted(std::int64_t steps) {
  CountedTrainer trainer;
  publish(&trainer);
  for (std::int64_t i = 0;
       i < steps && !external_stop.load(std::memory_order_relaxed) && !trainer.stop; ++i)
    trainer.backend.run();
}

// The same, and cannot be stopped from another thread.
[[gnu::noinline]] void hand_counted_noatomic(std::int64_t steps) {
  CountedTrainer trainer;
  publish(&trainer);
  for (std::int64_t i = 0; i < steps && !trainer.stop; ++i) trainer.backend.run();
}

// The best case a compiler can make of a hand-written loop: local variables only, so the
// backend's step lives in a register, and no flag of its own (a local flag no one sets folds
// away). Reported, not asserted against: a real backend is not a register.
[[gnu::noinline]] void hand_counted_registers(std::int64_t steps) {
  CountingBackend backend;
  for (std::int64_t i = 0; i < steps && !external_stop.load(std::memory_order_relaxed); ++i)
    backend.run();
}

// The same loop through a session with no hooks.
[[gnu::noinline]] void session_no_hooks(std::int64_t steps) {
  MonitoredSession session{CountingBackend{}};
  for (std::int64_t i = 0; i < steps && !session.should_stop(); ++i) session.run();
}

// The same with a hook that holds the coordinator from the start, so that another thread may
// stop the session: it checks the coordinator's atomic flag, as hand_counted its external_stop.
[[gnu::noinline]] void session_coordinator_hook(std::int64_t steps) {
  MonitoredSession session{CountingBackend{}, CoordinatorHook{}};
  for (std::int64_t i = 0; i < steps && !session.should_stop(); ++i) session.run();
}

// The same once another thread may stop it: the caller took the coordinator, so the session
// polls its atomic flag on every step, as hand_counted polls external_stop.
[[gnu::noinline]] void session_no_hooks_polled(std::int64_t steps) {
  MonitoredSession session{CountingBackend{}};
  runhooks::Coordinator& coord = session.coordinator();
  publish(&coord);
  for (std::int64_t i = 0; i < steps && !session.should_stop(); ++i) session.run();
}

#define RUNHOOKS_LIFECYCLE_4(i) LifecycleHook<i>{}, LifecycleHook<i + 1>{}, \
    LifecycleHook<i + 2>{}, LifecycleHook<i + 3>{}
#define RUNHOOKS_LIFECYCLE_20(i) RUNHOOKS_LIFECYCLE_4(i), RUNHOOKS_LIFECYCLE_4(i + 4), \
    RUNHOOKS_LIFECYCLE_4(i + 8), RUNHOOKS_LIFECYCLE_4(i + 12), RUNHOOKS_LIFECYCLE_4(i + 16)

// Four hooks without per-step callbacks (begin, after_create_session, end only).
[[gnu::noinline]] void session_lifecycle_4(std::int64_t steps) {
  MonitoredSession session{CountingBackend{}, RUNHOOKS_LIFECYCLE_4(0)};
  for (std::int64_t i = 0; i < steps && !session.should_stop(); ++i) session.run();
}

// Sixty of them.
[[gnu::noinline]] void session_lifecycle_60(std::int64_t steps) {
  MonitoredSession session{CountingBackend{}, RUNHOOKS_LIFECYCLE_20(0), RUNHOOKS_LIFECYCLE_20(20),
                           RUNHOOKS_LIFECYCLE_20(40)};
  for (std::int64_t i = 0; i < steps && !session.should_stop(); ++i) session.run();
}

// --- Loops that stop at a global step ---------------------------------------------------------

// Hand-written, the bare minimum: tests only its stop condition.
[[gnu::noinline]] void hand_bare(std::int64_t last_step) {
  BareTrainer trainer{CountingBackend{}, last_step};
  publish(&trainer);
  while (trainer.backend.global_step() < trainer.last_step) trainer.backend.run();
}

// The same with local variables only (reported, not asserted against).
[[gnu::noinline]] void hand_bare_registers(std::int64_t last_step) {
  CountingBackend backend;
  while (backend.global_step() < last_step) backend.run();
}

// Hand-written, the same work as StopAtStepHook + StepCounterHook: the stop test, the trigger
// test, the not-increased test, its own stop flag, and the external atomic flag.
[[gnu::noinline]] void hand_stop_counter(std::int64_t last_step) {
  HandTrainer<> trainer(last_step, every_n_steps);
  publish(&trainer);
  while (!external_stop.load(std::memory_order_relaxed) && !trainer.stop) trainer.step();
}

// The same without the external atomic flag.
[[gnu::noinline]] void hand_stop_counter_noatomic(std::int64_t last_step) {
  HandTrainer<> trainer(last_step, every_n_steps);
  publish(&trainer);
  while (!trainer.stop) trainer.step();
}

// The same work with local variables only, the backend's step in a register (reported, not
// asserted against). Written out rather than through hand_step(): passing the locals by
// reference makes g++ 12 keep them in memory (16.06 instructions per step instead of 14.06).
[[gnu::noinline]] void hand_stop_counter_registers(std::int64_t last_step) {
  CountingBackend backend;
  HandStepCounter counter(every_n_steps);
  bool stop = false;
  while (!external_stop.load(std::memory_order_relaxed) && !stop) {
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
}

[[gnu::noinline]] void session_stop_at_step(std::int64_t last_step) {
  MonitoredSession session{CountingBackend{}, stop_at(last_step)};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_counter_steps(std::int64_t last_step) {
  MonitoredSession session{CountingBackend{}, stop_at(last_step), counter_every_n_steps()};
  while (!session.should_stop()) session.run();
}

// The same with a GlobalStepWaiterHook that has nothing to wait for: after its first run it
// should cost nothing, and it reads the coordinator without making the session poll it.
[[gnu::noinline]] void session_stop_counter_waiter(std::int64_t last_step) {
  MonitoredSession session{CountingBackend{}, stop_at(last_step), counter_every_n_steps(),
                           GlobalStepWaiterHook<>(0)};
  while (!session.should_stop()) session.run();
}

// StopAtStepHook + StepCounterHook on a global step in an atomic: the run context reads it once
// for both hooks, as the hand-written loop does.
[[gnu::noinline]] void session_stop_counter_atomic_step(std::int64_t last_step) {
  MonitoredSession session{AtomicStepBackend{}, stop_at(last_step), counter_every_n_steps()};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void hand_stop_counter_atomic_step(std::int64_t last_step) {
  HandTrainer<AtomicStepBackend> trainer(last_step, every_n_steps);
  publish(&trainer);
  while (!trainer.stop) trainer.step();
}

[[gnu::noinline]] void session_stop_counter_secs(std::int64_t last_step) {
  MonitoredSession session{CountingBackend{}, stop_at(last_step), counter_every_n_secs()};
  while (!session.should_stop()) session.run();
}

// Four hooks with per-step callbacks.
[[gnu::noinline]] void session_4_per_step(std::int64_t last_step) {
  MonitoredSession session{CountingBackend{}, stop_at(last_step), counter_every_n_steps(),
                           GlobalStepWaiterHook<>(0), StepTallyHook{}};
  while (!session.should_stop()) session.run();
}

// The same four hooks among 60 without per-step callbacks.
[[gnu::noinline]] void session_64_hooks(std::int64_t last_step) {
  MonitoredSession session{CountingBackend{},      RUNHOOKS_LIFECYCLE_20(0),
                           stop_at(last_step),     RUNHOOKS_LIFECYCLE_20(20),
                           counter_every_n_steps(), GlobalStepWaiterHook<>(0),
                           RUNHOOKS_LIFECYCLE_20(40), StepTallyHook{}};
  while (!session.should_stop()) session.run();
}
#undef RUNHOOKS_LIFECYCLE_20
#undef RUNHOOKS_LIFECYCLE_4

}  // extern "C"

namespace {
struct Loop {
  const char* name;
  void (*run)(std::int64_t);
};
constexpr Loop loops[] = {
    {"hand_counted", hand_counted},
    {"hand_counted_noatomic", hand_counted_noatomic},
    {"hand_counted_registers", hand_counted_registers},
    {"session_no_hooks", session_no_hooks},
    {"session_no_hooks_polled", session_no_hooks_polled},
    {"session_coordinator_hook", session_coordinator_hook},
    {"session_lifecycle_4", session_lifecycle_4},
    {"session_lifecycle_60", session_lifecycle_60},
    {"hand_bare", hand_bare},
    {"hand_bare_registers", hand_bare_registers},
    {"hand_stop_counter", hand_stop_counter},
    {"hand_stop_counter_noatomic", hand_stop_counter_noatomic},
    {"hand_stop_counter_registers", hand_stop_counter_registers},
    {"session_stop_at_step", session_stop_at_step},
    {"session_stop_counter_steps", session_stop_counter_steps},
    {"session_stop_counter_secs", session_stop_counter_secs},
    {"session_stop_counter_waiter", session_stop_counter_waiter},
    {"session_stop_counter_atomic_step", session_stop_counter_atomic_step},
    {"hand_stop_counter_atomic_step", hand_stop_counter_atomic_step},
    {"session_4_per_step", session_4_per_step},
    {"session_64_hooks", session_64_hooks},
};
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s STEPS [NAME...]\n", argv[0]);
    return 2;
  }
  const std::int64_t steps = std::strtoll(argv[1], nullptr, 10);
  if (argc == 2) {
    for (const Loop& loop : loops) loop.run(steps);
    return 0;
  }
  for (int a = 2; a < argc; ++a) {
    bool found = false;
    for (const Loop& loop : loops) {
      if (std::strcmp(loop.name, argv[a]) == 0) {
        loop.run(steps);
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "unknown loop: %s\n", argv[a]);
      return 2;
    }
  }
  return 0;
}
