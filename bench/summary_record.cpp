// The training thread's cost of one scalar summary record (issue 21): EventFileWriter::add_scalar,
// SummaryOutput::record (StepCounterHook's TensorBoard output) and a SummarySaverHook that writes
// on every step, each as the library does it (`buffered`: records reach the file within
// flush_secs, by a background flush) and as it did before (`flush_each`: one write syscall after
// every record, which a caller still gets by calling flush() after each record). One Google
// Benchmark iteration is one record (one session step for the hook; `summary_saver_hook/silent`
// is the same session with a hook that does not write, so the record costs the difference).
// Amortised: each run ends with a flush() of what it wrote, and the background thread's writes
// happen meanwhile. The CPU column is the training thread's (Google Benchmark's default), Time
// is wall time; the `process_cpu` rows count the background thread's CPU as well.
// The event files go to a fresh directory under the system's temporary directory, removed at exit.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/event_writer.hpp>

namespace {

namespace fs = std::filesystem;

// One directory per benchmark run, so that each run starts a new event file.
class Scratch {
 public:
  Scratch() {
    std::random_device entropy;
    root_ = fs::temp_directory_path() / ("runhooks-bench-summary-" + std::to_string(entropy()));
    fs::create_directories(root_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  fs::path fresh() { return root_ / std::to_string(next_++); }

 private:
  fs::path root_;
  std::atomic<int> next_{0};
};

Scratch& scratch() {
  static Scratch dir;
  return dir;
}

void check(benchmark::State& state, const std::error_code& error) {
  if (error) state.SkipWithError(("the event file failed: " + error.message()).c_str());
}

template <bool flush_each>
void writer_add_scalar(benchmark::State& state) {
  const auto writer = runhooks::EventFileWriterCache::get(scratch().fresh());
  std::int64_t step = 0;
  for (auto _ : state) {
    writer->add_scalar("global_step/sec", 1234.5F, ++step);
    if constexpr (flush_each) writer->flush();
  }
  writer->flush();  // the records of this run are paid for by this run
  check(state, writer->error());
  state.SetItemsProcessed(state.iterations());
}

template <bool flush_each>
void summary_output_record(benchmark::State& state) {
  runhooks::SummaryOutput output(scratch().fresh(), /*log_line=*/false);
  std::int64_t step = 0;
  for (auto _ : state) {
    output.record("global_step/sec", 1234.5, ++step);
    if constexpr (flush_each) output.writer().flush();
  }
  output.writer().flush();
  check(state, output.error());
  state.SetItemsProcessed(state.iterations());
}

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};

// One increment per run; a loss to fetch.
struct LossBackend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 0.25F; }
};

// The hook's writer before issue 21: each summary is flushed at once.
struct FlushEachWriter : runhooks::EventFileSummaryWriter {
  using runhooks::EventFileSummaryWriter::EventFileSummaryWriter;
  void write_summary(const std::vector<runhooks::SummaryItem>& values, std::int64_t step) {
    runhooks::EventFileSummaryWriter::write_summary(values, step);
    flush();
  }
};

template <class Writer>
void summary_saver_hook(benchmark::State& state, std::int64_t save_steps) {
  runhooks::MonitoredSession session(
      LossBackend{},
      runhooks::SummarySaverHook<runhooks::Scalars<Loss>, runhooks::Histograms<>, Writer>(
          {.save_steps = save_steps}, scratch().fresh(), runhooks::scalars<Loss>));
  for (auto _ : state) session.run();
  session.template hook<0>().writer().flush();
  if (auto* writer = session.template hook<0>().writer().writer()) check(state, writer->error());
  session.close();
  state.SetItemsProcessed(state.iterations());
}

const bool registered = [] {
  benchmark::RegisterBenchmark("writer_add_scalar/buffered", writer_add_scalar<false>);
  benchmark::RegisterBenchmark("writer_add_scalar/flush_each", writer_add_scalar<true>);
  benchmark::RegisterBenchmark("summary_output_record/buffered", summary_output_record<false>);
  benchmark::RegisterBenchmark("summary_output_record/flush_each", summary_output_record<true>);
  benchmark::RegisterBenchmark("summary_saver_hook/silent", [](benchmark::State& state) {
    summary_saver_hook<runhooks::EventFileSummaryWriter>(state, std::int64_t{1} << 50);
  });
  benchmark::RegisterBenchmark("summary_saver_hook/buffered", [](benchmark::State& state) {
    summary_saver_hook<runhooks::EventFileSummaryWriter>(state, 1);
  });
  benchmark::RegisterBenchmark("summary_saver_hook/flush_each", [](benchmark::State& state) {
    summary_saver_hook<FlushEachWriter>(state, 1);
  });
  // The CPU time of the whole process, the background thread's CRCs and writes included: what a
  // record costs the machine rather than the training thread.
  benchmark::RegisterBenchmark("writer_add_scalar/buffered/process_cpu", writer_add_scalar<false>)
      ->MeasureProcessCPUTime();
  benchmark::RegisterBenchmark("writer_add_scalar/flush_each/process_cpu", writer_add_scalar<true>)
      ->MeasureProcessCPUTime();
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
