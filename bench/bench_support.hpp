// What the benchmarks share: two step bodies, the hand-written loops, extra hooks, and the
// dynamic baseline (TensorFlow-shaped virtual hooks) that a user would otherwise write.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>

namespace bench {

inline volatile std::int64_t step_sink = 0;
inline volatile float loss_sink = 0.0f;

// A nearly empty step: one increment and one volatile store, so no loop can be deleted.
struct EmptyBackend {
  std::int64_t step = 0;
  void run() noexcept {
    ++step;
    step_sink = step;
  }
  std::int64_t global_step() const noexcept { return step; }
};

// A realistic small step: one SGD update of a linear model with 256 float weights on a fixed
// example (a dot product, then an axpy), about 100-200 ns.
struct SgdBackend {
  static constexpr std::size_t size = 256;
  std::array<float, size> w{};
  std::array<float, size> x{};
  float y = 1.0f;
  float learning_rate = 1e-4f;
  std::int64_t step = 0;

  SgdBackend() {
    for (std::size_t i = 0; i < size; ++i) x[i] = static_cast<float>(i % 7) * 0.01f;
  }
  void run() noexcept {
    float prediction = 0.0f;
    for (std::size_t i = 0; i < size; ++i) prediction += w[i] * x[i];
    const float error = prediction - y;
    for (std::size_t i = 0; i < size; ++i) w[i] -= learning_rate * error * x[i];
    loss_sink = error * error;
    ++step;
  }
  std::int64_t global_step() const noexcept { return step; }
};

// StepCounterHook's output in the benchmarks: records nothing, so that the numbers measure the
// hook mechanics, not a log line every 100 steps.
struct NullOutput {
  void record(std::string_view, double, std::int64_t) noexcept {}
};
using Counter = runhooks::StepCounterHook<runhooks::SteadyClock, NullOutput>;

// A last step no benchmark reaches: the stop test runs every step and never fires.
inline constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max() / 2;
inline constexpr std::int64_t every_n_steps = 100;  // TensorFlow's default
inline constexpr double every_n_secs = 1.0;

inline runhooks::StopAtStepHook stop_at_step() {
  return runhooks::StopAtStepHook(runhooks::StopAtStepOptions{.last_step = never});
}
inline Counter counter_every_n_steps() {
  return Counter(runhooks::StepCounterOptions{.every_n_steps = every_n_steps});
}
inline Counter counter_every_n_secs() {
  return Counter(runhooks::StepCounterOptions{.every_n_secs = every_n_secs});
}

// A user hook with a per-step callback.
struct StepTallyHook {
  std::int64_t steps = 0;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) noexcept {
    ++steps;
  }
};

// A user hook without one: begin, after_create_session and end only.
inline volatile int lifecycle_sink = 0;
struct LifecycleHook {
  void begin() noexcept { lifecycle_sink = 1; }
  template <class Backend>
  void after_create_session(Backend&) noexcept {
    lifecycle_sink = 2;
  }
  template <class Backend>
  void end(Backend&) noexcept {
    lifecycle_sink = 3;
  }
};

// The every_n_secs counter a user writes without thinking: reads the clock after every step.
class NaiveSecsCounterHook {
 public:
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    const std::int64_t global_step = run_context.session().global_step();
    const double now = runhooks::SteadyClock::now();
    if (now >= last_time_ + every_n_secs) [[unlikely]]
      trigger(global_step, now);
    if (global_step == last_global_step_) [[unlikely]]
      lifecycle_sink = 4;
    last_global_step_ = global_step;
  }

 private:
  [[gnu::noinline]] void trigger(std::int64_t global_step, double now) {
    if (last_step_ >= 0)
      output_.record("global_step/sec",
                     static_cast<double>(global_step - last_step_) / (now - last_time_),
                     global_step);
    last_step_ = global_step;
    last_time_ = now;
  }
  double last_time_ = -1e300;
  std::int64_t last_step_ = -1;
  std::int64_t last_global_step_ = std::numeric_limits<std::int64_t>::min();
  NullOutput output_;
};

// --- The hand-written loop -------------------------------------------------------------------

// What a user writes without runhooks to do the work of StopAtStepHook + StepCounterHook
// (every_n_steps): a loop that can be stopped from another thread (an external std::atomic<bool>
// read with a relaxed load, as MonitoredSession::should_stop() reads its Coordinator's), with its
// own stop flag, the stop test, the trigger test and the not-increased test, rare paths out of
// line.
inline std::atomic<bool> external_stop{false};

template <class Backend>
struct HandTrainer {
  Backend backend;
  std::int64_t last_step = never;
  bool stop = false;
  runhooks::SecondOrStepTimer<> timer{runhooks::TimerOptions{.every_steps = every_n_steps}};
  std::int64_t next_check = std::numeric_limits<std::int64_t>::min();
  std::int64_t last_global_step = std::numeric_limits<std::int64_t>::min();
  NullOutput output;

  bool should_stop() const noexcept {
    return external_stop.load(std::memory_order_relaxed) || stop;
  }
  void step() {
    backend.run();
    const std::int64_t global_step = backend.global_step();
    bool stop_requested = false;
    if (global_step >= last_step) [[unlikely]]
      stop_requested = true;
    if (global_step >= next_check) [[unlikely]]
      check(global_step);
    if (global_step == last_global_step) [[unlikely]]
      lifecycle_sink = 5;
    last_global_step = global_step;
    if (stop_requested) [[unlikely]]
      stop = true;
  }
  [[gnu::noinline]] void check(std::int64_t global_step) {
    if (timer.should_trigger_for_step(global_step)) {
      const runhooks::TimerElapsed elapsed = timer.update_last_triggered_step(global_step);
      if (elapsed.secs && *elapsed.secs > 0.0)
        output.record("global_step/sec", static_cast<double>(*elapsed.steps) / *elapsed.secs,
                      global_step);
    }
    next_check = *timer.last_triggered_step() + every_n_steps;
  }
};

// --- The dynamic baseline --------------------------------------------------------------------

// TensorFlow's shape: hooks derive from one base with virtual no-op hook points; the session
// holds std::vector<std::unique_ptr<Hook>>, calls every before_run and after_run of every hook,
// merges a run-args object per step, and hands each hook a run context and run values.
struct DynRunArgs {
  std::vector<std::string> fetches;  // what TF's SessionRunArgs.fetches would name
};
struct DynRunValues {
  std::vector<double> results;
};

template <class Backend>
struct DynHook {
  using Context = runhooks::SessionRunContext<Backend>;
  virtual ~DynHook() = default;
  virtual void begin() {}
  virtual void after_create_session(Backend&, runhooks::Coordinator&) {}
  virtual DynRunArgs before_run(Context&) { return {}; }
  virtual void after_run(Context&, const DynRunValues&) {}
  virtual void end(Backend&) {}
};

// Wraps one of our hooks (or a user hook) in the virtual interface, forwarding each point the
// hook has: the same per-step work behind a virtual call.
template <class Backend, class Hook>
struct DynAdapter final : DynHook<Backend> {
  using Context = runhooks::SessionRunContext<Backend>;
  using Values = runhooks::SessionRunValues<runhooks::SessionRunArgs<>>;
  Hook hook;
  explicit DynAdapter(Hook h) : hook(std::move(h)) {}
  void begin() override {
    if constexpr (runhooks::HasBegin<Hook>) hook.begin();
  }
  void after_create_session(Backend& b, runhooks::Coordinator& c) override {
    if constexpr (runhooks::HasAfterCreateSession<Hook, Backend>)
      runhooks::call_after_create_session(hook, b, c);
  }
  DynRunArgs before_run(Context& ctx) override {
    if constexpr (runhooks::HasBeforeRun<Hook, Context>) hook.before_run(ctx);
    return {};
  }
  void after_run(Context& ctx, const DynRunValues&) override {
    if constexpr (runhooks::HasAfterRun<Hook, Context, Values>) hook.after_run(ctx, Values{});
  }
  void end(Backend& b) override {
    if constexpr (runhooks::HasEnd<Hook, Backend>) hook.end(b);
  }
};

template <class Backend>
class DynamicSession {
 public:
  using HookPtr = std::unique_ptr<DynHook<Backend>>;
  explicit DynamicSession(std::vector<HookPtr> hooks) : hooks_(std::move(hooks)) {
    for (auto& h : hooks_) h->begin();
    for (auto& h : hooks_) h->after_create_session(backend_, coord_);
  }
  ~DynamicSession() {
    for (auto& h : hooks_) h->end(backend_);
  }
  bool should_stop() const noexcept { return stop_ || coord_.should_stop(); }
  void run() {
    const runhooks::SessionRunArgs<> caller_args;
    runhooks::SessionRunContext<Backend> ctx(caller_args, backend_);
    DynRunArgs merged;
    for (auto& h : hooks_) {
      DynRunArgs request = h->before_run(ctx);
      if (!request.fetches.empty()) [[unlikely]]
        merged.fetches.insert(merged.fetches.end(), request.fetches.begin(),
                              request.fetches.end());
    }
    backend_.run();
    const DynRunValues values;
    for (auto& h : hooks_) h->after_run(ctx, values);
    if (ctx.stop_requested()) [[unlikely]]
      stop_ = true;
  }
  Backend& raw_session() noexcept { return backend_; }

 private:
  Backend backend_;
  std::vector<HookPtr> hooks_;
  runhooks::Coordinator coord_;
  bool stop_ = false;
};

template <class Backend, class... Hooks>
std::vector<std::unique_ptr<DynHook<Backend>>> dynamic_hooks(Hooks... hooks) {
  std::vector<std::unique_ptr<DynHook<Backend>>> v;
  (v.push_back(std::make_unique<DynAdapter<Backend, Hooks>>(std::move(hooks))), ...);
  return v;
}

}  // namespace bench
