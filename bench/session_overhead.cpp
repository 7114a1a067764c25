// Per-step cost of MonitoredSession against a hand-written loop and against the dynamic
// (virtual, TensorFlow-shaped) hooks a user would otherwise write. One Google Benchmark
// iteration is one step: should_stop(), then run(). Names are BODY/KIND/CONFIG, with BODY
// `empty` (one increment and a volatile store) or `sgd` (an SGD update of 256 floats). See
// bench/README.md for what each configuration is and how tools/bench_report.py publishes them.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>
#include <utility>

#include <runhooks/monitored_session.hpp>

#include "bench_support.hpp"

namespace {

using namespace bench;
using runhooks::GlobalStepWaiterHook;
using runhooks::MonitoredSession;

template <class Session>
void steps(benchmark::State& state, Session& session) {
  for (auto _ : state) {
    if (session.should_stop()) [[unlikely]] {
      state.SkipWithError("the session stopped");
      break;
    }
    session.run();
  }
  benchmark::DoNotOptimize(session.raw_session().global_step());
  state.SetItemsProcessed(state.iterations());
}

// The hand-written loop doing the work of StopAtStepHook + StepCounterHook(every_n_steps).
template <class Backend>
void hand_written(benchmark::State& state) {
  HandTrainer<Backend> trainer;
  for (auto _ : state) {
    if (trainer.should_stop()) [[unlikely]] {
      state.SkipWithError("stopped");
      break;
    }
    trainer.step();
  }
  benchmark::DoNotOptimize(trainer.backend.global_step());
  state.SetItemsProcessed(state.iterations());
}

// The bare minimum: the stop test only.
template <class Backend>
void hand_written_bare(benchmark::State& state) {
  Backend backend;
  const std::int64_t last_step = never;
  for (auto _ : state) {
    if (backend.global_step() >= last_step) [[unlikely]] {
      state.SkipWithError("stopped");
      break;
    }
    backend.run();
  }
  benchmark::DoNotOptimize(backend.global_step());
  state.SetItemsProcessed(state.iterations());
}

// A static and a dynamic session over the same hooks, made by make_hooks() each time.
template <class Backend, class MakeHooks>
void add_pair(const std::string& body, const std::string& config, MakeHooks make_hooks) {
  benchmark::RegisterBenchmark(("static/" + config + "/" + body).c_str(),
                               [make_hooks](benchmark::State& state) {
                                 auto session = std::apply(
                                     [](auto... hooks) {
                                       return MonitoredSession{Backend{}, std::move(hooks)...};
                                     },
                                     make_hooks());
                                 steps(state, session);
                               });
  benchmark::RegisterBenchmark(("dynamic/" + config + "/" + body).c_str(),
                               [make_hooks](benchmark::State& state) {
                                 DynamicSession<Backend> session(std::apply(
                                     [](auto... hooks) {
                                       return dynamic_hooks<Backend>(std::move(hooks)...);
                                     },
                                     make_hooks()));
                                 steps(state, session);
                               });
}

// N hooks: min(N, 4) with per-step callbacks (StopAtStepHook, StepCounterHook every_n_steps,
// GlobalStepWaiterHook(0), a user hook counting steps), the rest without (LifecycleHook).
template <std::size_t N>
auto mixed_hooks() {
  auto per_step = std::tuple{stop_at_step(), counter_every_n_steps(), GlobalStepWaiterHook<>(0),
                             StepTallyHook{}};
  if constexpr (N == 1) {
    return std::tuple{stop_at_step()};
  } else {
    return std::tuple_cat(std::move(per_step), []<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple{((void)I, LifecycleHook{})...};
    }(std::make_index_sequence<N - 4>{}));
  }
}

template <class Backend>
void add_all(const std::string& body) {
  benchmark::RegisterBenchmark(("hand_written/stop+counter/" + body).c_str(),
                               hand_written<Backend>);
  benchmark::RegisterBenchmark(("hand_written/bare/" + body).c_str(),
                               hand_written_bare<Backend>);
  add_pair<Backend>(body, "no_hooks", [] { return std::tuple{}; });
  add_pair<Backend>(body, "stop_at_step", [] { return std::tuple{stop_at_step()}; });
  add_pair<Backend>(body, "step_counter_steps", [] { return std::tuple{counter_every_n_steps()}; });
  add_pair<Backend>(body, "step_counter_secs", [] { return std::tuple{counter_every_n_secs()}; });
  add_pair<Backend>(body, "naive_counter_secs", [] { return std::tuple{NaiveSecsCounterHook{}}; });
  add_pair<Backend>(body, "stop+counter", [] {
    return std::tuple{stop_at_step(), counter_every_n_steps()};
  });
  add_pair<Backend>(body, "three_hooks", [] {
    return std::tuple{stop_at_step(), counter_every_n_steps(), GlobalStepWaiterHook<>(0)};
  });
  add_pair<Backend>(body, "hooks:1", [] { return mixed_hooks<1>(); });
  add_pair<Backend>(body, "hooks:4", [] { return mixed_hooks<4>(); });
  add_pair<Backend>(body, "hooks:16", [] { return mixed_hooks<16>(); });
  add_pair<Backend>(body, "hooks:64", [] { return mixed_hooks<64>(); });
}

const bool registered = [] {
  add_all<EmptyBackend>("empty");
  add_all<SgdBackend>("sgd");
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
