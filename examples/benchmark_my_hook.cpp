// Measuring your own hook's per-step cost with <runhooks/benchmark.hpp>: two lines register a
// benchmark of the hook against the same session without it. Run as a test, it uses a short
// minimum time so that it finishes in about a second, and checks that both benchmarks ran.
#include <runhooks/benchmark.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

// A backend whose step is nearly free, so that the hooks' cost stands out.
struct TinyBackend {
  std::int64_t step = 0;
  void run() noexcept { ++step; }
  std::int64_t global_step() const noexcept { return step; }
};

// The hook under test: stops when the loss it watches is not finite (here: never).
struct NanGuardHook {
  std::int64_t checked = 0;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    ++checked;
    if (run_context.session().global_step() < 0) [[unlikely]]
      run_context.request_stop();
  }
};

RUNHOOKS_BENCHMARK_HOOKS(nan_guard, [] { return TinyBackend{}; }, [] { return NanGuardHook{}; });

// Several hooks at once, through the function.
const bool registered = runhooks::register_hook_benchmark(
    "nan_guard+stop_at_step", [] { return TinyBackend{}; }, [] { return NanGuardHook{}; },
    [] {
      return runhooks::StopAtStepHook(
          runhooks::StopAtStepOptions{.last_step = std::numeric_limits<std::int64_t>::max()});
    });

// Counts the benchmarks that ran without error, and prints them as the console reporter does.
class CheckingReporter : public benchmark::ConsoleReporter {
 public:
  int ran = 0;
  int failed = 0;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) (run.error_occurred ? failed : ran) += 1;
    ConsoleReporter::ReportRuns(runs);
  }
};

int main(int argc, char** argv) {
  // A short minimum time unless the command line sets one (1.7 wants a bare number of seconds).
  std::vector<char*> args(argv, argv + argc);
  std::string min_time = "--benchmark_min_time=0.01";
  bool has_min_time = false;
  for (char* a : args) has_min_time = has_min_time || std::string(a).starts_with("--benchmark_min_time");
  if (!has_min_time) args.push_back(min_time.data());
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  CheckingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  if (reporter.ran != 4 || reporter.failed != 0) {
    std::fprintf(stderr, "expected 4 benchmarks without error, got %d ran and %d failed\n",
                 reporter.ran, reporter.failed);
    return 1;
  }
  return 0;
}
