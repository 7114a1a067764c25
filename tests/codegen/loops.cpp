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

#include <runhooks/checkpoint/best_checkpoint_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/saver/exception_checkpoint_hook.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/hooks/early_stopping_hook.hpp>
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/hooks/final_ops_hook.hpp>
#include <runhooks/hooks/learning_rate_monitor_hook.hpp>
#include <runhooks/hooks/learning_rate_schedule_hook.hpp>
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/hooks/throughput_monitor_hook.hpp>
#include <runhooks/hooks/time_limit_hook.hpp>
#include <runhooks/hooks/lambda_hook.hpp>
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/hooks/profiler_hook.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

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

// A step or period no loop reaches: the hooks stay silent after their first run.
constexpr std::int64_t never = std::int64_t{1} << 50;

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};

// CountingBackend with what the issue 11 and 12 hooks need: a loss to fetch and a checkpoint
// (one small file). None of these members runs on a silent step.
struct HookBackend : CountingBackend {
  float fetch(Loss) const noexcept { return static_cast<float>(step); }
  void save(const std::filesystem::path& prefix) const {
    std::ofstream(prefix.string() + ".step") << step;
  }
  void restore(const std::filesystem::path& prefix) {
    std::ifstream(prefix.string() + ".step") >> step;
  }
};

// HookBackend with a learning rate, for the issue 27 hooks (runhooks::HasLearningRate).
struct RateBackend : HookBackend {
  double rate = 0.1;
  double learning_rate() const noexcept { return rate; }
  void set_learning_rate(double r) noexcept { rate = r; }
};

// HookBackend with a cumulative samples counter, for ThroughputMonitorHook's counter keys.
struct SamplesSeen : runhooks::Key<std::int64_t> {
  static constexpr std::string_view name = "samples_seen";
};
struct CountingSamplesBackend : HookBackend {
  std::int64_t fetch(SamplesSeen) const noexcept { return 32 * step; }
  using HookBackend::fetch;
};

// This process's scratch directory (two processes count at once), one subdirectory per loop.
std::filesystem::path scratch_root;
std::string scratch(const char* loop) { return (scratch_root / loop).string(); }

std::FILE* null_stream() {
  static std::FILE* const stream = std::fopen("/dev/null", "w");
  return stream;
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

// --- Issue 11 and 12 hooks between their triggers ----------------------------------------------
// Each loop is StopAtStepHook plus one more hook on HookBackend (CountingBackend's step, plus the
// members the hooks need, none called on a silent step). What a hook adds to a step is compared
// with what a second StopAtStepHook adds (session_stop_stop), or, for every-N-seconds hooks, with
// what StepCounterHook(every_n_secs) adds (session_stop_counter_secs_hb). Hooks that write files
// write them under a directory of their own, made by main(); their writes at creation, at the
// first step and in end() cancel out of the per-step count.

[[gnu::noinline]] void session_stop_stop(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step), stop_at(never)};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_counter_secs_hb(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step), counter_every_n_secs()};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_checkpoint_steps(std::int64_t last_step) {
  MonitoredSession session{
      HookBackend{}, stop_at(last_step),
      runhooks::CheckpointSaverHook({.checkpoint_dir = scratch("ckpt_steps"), .save_steps = never})};
  while (!session.should_stop()) session.run();
}

// Issue 27, item 2: BestCheckpointHook between its checks, before the saver it saves through.
[[gnu::noinline]] void session_stop_checkpoint_best(std::int64_t last_step) {
  MonitoredSession session{
      HookBackend{}, stop_at(last_step), runhooks::BestCheckpointHook<Loss>({.every_n_iter = never}),
      runhooks::CheckpointSaverHook({.checkpoint_dir = scratch("ckpt_best"), .save_steps = never})};
  runhooks::link_hooks(session);
  while (!session.should_stop()) session.run();
}

// Its reference: the same with a second StopAtStepHook in its place.
[[gnu::noinline]] void session_stop_checkpoint_steps_stop(std::int64_t last_step) {
  MonitoredSession session{
      HookBackend{}, stop_at(last_step), stop_at(never),
      runhooks::CheckpointSaverHook({.checkpoint_dir = scratch("ckpt_steps_stop"), .save_steps = never})};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_checkpoint_secs(std::int64_t last_step) {
  MonitoredSession session{
      HookBackend{}, stop_at(last_step),
      runhooks::CheckpointSaverHook({.checkpoint_dir = scratch("ckpt_secs"), .save_secs = 1e6})};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_signal(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step), runhooks::SignalStopHook{}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_logging_steps(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::LoggingTensorHook{runhooks::keys<Loss>, {.every_n_iter = never}}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_logging_secs(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::LoggingTensorHook{runhooks::keys<Loss>, {.every_n_secs = 1e6}}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_summary_steps(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::SummarySaverHook{{.save_steps = never}, scratch("summary"),
                                                      runhooks::scalars<Loss>}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_profiler_steps(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::ProfilerHook{{.save_steps = never}, scratch("profile")}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_early_stopping(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::EarlyStoppingHook<Loss>({.every_n_iter = never})};
  while (!session.should_stop()) session.run();
}

// Issue 27: the early-stopping options of Lightning change only the check, not the silent step.
[[gnu::noinline]] void session_stop_early_stopping_lightning(std::int64_t last_step) {
  MonitoredSession session{
      HookBackend{}, stop_at(last_step),
      runhooks::EarlyStoppingHook<Loss>({.every_n_iter = never, .stopping_threshold = -1.0,
                                         .divergence_threshold = 1e9, .check_finite = true,
                                         .min_steps = 10})};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_reduce_lr(std::int64_t last_step) {
  MonitoredSession session{RateBackend{}, stop_at(last_step),
                           runhooks::ReduceLROnPlateauHook<Loss>({.every_n_iter = never})};
  while (!session.should_stop()) session.run();
}

// Issue 27, item 1: an EvaluationHook between evaluations, and one feeding EarlyStoppingHook the
// key it produces (the consumer's fetch is filled from the producer, not the backend).
struct ValLoss : runhooks::Key<double> {};
struct Evaluate {
  runhooks::KeyValues<ValLoss> operator()(HookBackend& backend) const {
    return runhooks::KeyValues<ValLoss>(static_cast<double>(backend.step));
  }
};

[[gnu::noinline]] void session_stop_evaluation(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::EvaluationHook{runhooks::keys<ValLoss>, Evaluate{},
                                                    {.every_n_steps = never, .log = false}}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_evaluation_early_stopping(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::EvaluationHook{runhooks::keys<ValLoss>, Evaluate{},
                                                    {.every_n_steps = never, .log = false}},
                           runhooks::EarlyStoppingHook<ValLoss>()};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_lr_schedule(std::int64_t last_step) {
  MonitoredSession session{RateBackend{}, stop_at(last_step),
                           runhooks::LearningRateScheduleHook{[](std::int64_t) { return 0.1; },
                                                              {.every_n_steps = never}}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_lr_monitor(std::int64_t last_step) {
  MonitoredSession session{RateBackend{}, stop_at(last_step),
                           runhooks::LearningRateMonitorHook{{.every_n_steps = never}, NullOutput{}}};
  while (!session.should_stop()) session.run();
}

// Every metric ThroughputMonitorHook has (samples, items, FLOPs, MFU), between report points.
[[gnu::noinline]] void session_stop_throughput(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::ThroughputMonitorHook{{.every_n_steps = never,
                                                            .samples_per_step = 32,
                                                            .items_per_step = 4096,
                                                            .flops_per_sample = 1e9,
                                                            .available_flops = 1e15},
                                                           NullOutput{}}};
  while (!session.should_stop()) session.run();
}

// The same with the samples read from the backend's counter key (on report steps only).
[[gnu::noinline]] void session_stop_throughput_keys(std::int64_t last_step) {
  MonitoredSession session{
      CountingSamplesBackend{}, stop_at(last_step),
      runhooks::ThroughputMonitorHook{runhooks::throughput_keys<SamplesSeen>,
                                      {.every_n_steps = never, .flops_per_sample = 1e9},
                                      NullOutput{}}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_time_limit(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::TimeLimitHook({.max_secs = 1e8, .resolution_secs = 1e3})};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_progress_bar(std::int64_t last_step) {
  MonitoredSession session{
      HookBackend{}, stop_at(last_step),
      runhooks::ProgressBarHook{runhooks::keys<Loss>,
                                {.plain_line_secs = 1e6, .terminal = false},
                                null_stream()}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_final_ops(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::FinalOpsHook{runhooks::keys<Loss>}};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_lambda_lifecycle(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::on_begin([] { lifecycle_sink = 1; })};
  while (!session.should_stop()) session.run();
}

// A hook defining only on_exception: run() catches what leaves it, to call the hook.
[[gnu::noinline]] void session_stop_on_exception(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step),
                           runhooks::ExceptionCheckpointHook({.checkpoint_dir = scratch("on_exception")})};
  while (!session.should_stop()) session.run();
}

[[gnu::noinline]] void session_stop_only_hb(std::int64_t last_step) {
  MonitoredSession session{HookBackend{}, stop_at(last_step)};
  while (!session.should_stop()) session.run();
}

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
    {"session_stop_stop", session_stop_stop},
    {"session_stop_counter_secs_hb", session_stop_counter_secs_hb},
    {"session_stop_checkpoint_steps", session_stop_checkpoint_steps},
    {"session_stop_checkpoint_best", session_stop_checkpoint_best},
    {"session_stop_checkpoint_steps_stop", session_stop_checkpoint_steps_stop},
    {"session_stop_checkpoint_secs", session_stop_checkpoint_secs},
    {"session_stop_signal", session_stop_signal},
    {"session_stop_logging_steps", session_stop_logging_steps},
    {"session_stop_logging_secs", session_stop_logging_secs},
    {"session_stop_summary_steps", session_stop_summary_steps},
    {"session_stop_profiler_steps", session_stop_profiler_steps},
    {"session_stop_early_stopping", session_stop_early_stopping},
    {"session_stop_early_stopping_lightning", session_stop_early_stopping_lightning},
    {"session_stop_reduce_lr", session_stop_reduce_lr},
    {"session_stop_evaluation", session_stop_evaluation},
    {"session_stop_evaluation_early_stopping", session_stop_evaluation_early_stopping},
    {"session_stop_lr_schedule", session_stop_lr_schedule},
    {"session_stop_lr_monitor", session_stop_lr_monitor},
    {"session_stop_throughput", session_stop_throughput},
    {"session_stop_throughput_keys", session_stop_throughput_keys},
    {"session_stop_time_limit", session_stop_time_limit},
    {"session_stop_progress_bar", session_stop_progress_bar},
    {"session_stop_final_ops", session_stop_final_ops},
    {"session_stop_lambda_lifecycle", session_stop_lambda_lifecycle},
    {"session_stop_on_exception", session_stop_on_exception},
    {"session_stop_only_hb", session_stop_only_hb},
};
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s STEPS [NAME...]\n", argv[0]);
    return 2;
  }
  const std::int64_t steps = std::strtoll(argv[1], nullptr, 10);
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  char root[] = "/tmp/runhooks-loops-XXXXXX";
  if (::mkdtemp(root) == nullptr) return 2;
  scratch_root = root;
  struct Cleanup {
    ~Cleanup() { std::filesystem::remove_all(scratch_root); }
  } cleanup;
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
