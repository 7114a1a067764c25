// Google Benchmark registration for measuring what a set of hooks costs per step, against the
// same session without them. Needs Google Benchmark (<benchmark/benchmark.h>, link -lbenchmark);
// it is not included by <runhooks/runhooks.hpp>.
#pragma once

#include <runhooks/detail/config.hpp>

#include <benchmark/benchmark.h>

#include <string>
#include <utility>

#include <runhooks/monitored_session.hpp>

namespace runhooks {

namespace detail {

template <class Session>
void benchmark_steps(benchmark::State& state, Session& session) {
  for (auto _ : state) {
    if (session.should_stop()) [[unlikely]] {
      state.SkipWithError("runhooks: the session stopped during the benchmark; give it more "
                          "steps (e.g. StopAtStepHook with a larger last_step)");
      break;
    }
    session.run();
  }
  state.SetItemsProcessed(state.iterations());
}

}  // namespace detail

// Registers two benchmarks, "<name>/baseline" (a SingularMonitoredSession over a fresh backend,
// no hooks) and "<name>/hooks" (the same with one hook from each factory), each timing one step
// (should_stop() then run()) per iteration. The difference of the two times is what the hooks
// cost per step. Factories are called again for every run of a benchmark, so each run starts
// from a fresh backend and fresh hooks. Returns true, so it can initialize a namespace-scope
// constant before BENCHMARK_MAIN():
//
//   const bool registered = runhooks::register_hook_benchmark(
//       "my_hook", [] { return MyBackend{}; }, [] { return MyHook{}; });
//
// Hooks that stop the session (StopAtStepHook) must be given a last step beyond the
// benchmark's iterations, or the benchmark reports an error.
template <class BackendFactory, class... HookFactories>
bool register_hook_benchmark(const std::string& name, BackendFactory make_backend,
                             HookFactories... make_hooks) {
  benchmark::RegisterBenchmark((name + "/baseline").c_str(),
                               [make_backend](benchmark::State& state) mutable {
                                 SingularMonitoredSession session{make_backend()};
                                 detail::benchmark_steps(state, session);
                               });
  benchmark::RegisterBenchmark((name + "/hooks").c_str(),
                               [make_backend, make_hooks...](benchmark::State& state) mutable {
                                 SingularMonitoredSession session{make_backend(), make_hooks()...};
                                 detail::benchmark_steps(state, session);
                               });
  return true;
}

}  // namespace runhooks

// The same at namespace scope in one line:
//   RUNHOOKS_BENCHMARK_HOOKS(my_hook, [] { return MyBackend{}; }, [] { return MyHook{}; });
#define RUNHOOKS_BENCHMARK_HOOKS(name, backend_factory, ...)                                  \
  [[maybe_unused]] static const bool runhooks_benchmark_registered_##name =                   \
      ::runhooks::register_hook_benchmark(#name, backend_factory, __VA_ARGS__)
