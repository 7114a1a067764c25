// How long the step that triggers a checkpoint stalls, for a synchronous save and for an
// asynchronous one, of the same 64 MiB state, side by side in one run. One iteration is one
// such step (manual time: only that step is timed); between iterations the previous background
// save is let finish and a step that saves nothing collects it, so no save is in flight when the
// timed step starts. The counters give, in milliseconds, the mean of what a step costs when no
// save triggers (`plain_step_ms`) and, for the asynchronous save, the time the background write
// and commit took (`write_ms`). The checkpoints go to $TMPDIR (or /tmp); every save is fsynced,
// so the numbers depend on that disk.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <memory>
#include <utility>
#include <vector>

#include <stdlib.h>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/monitored_session.hpp>

namespace {

namespace fs = std::filesystem;
constexpr std::size_t state_doubles = std::size_t{64} << 20 >> 3;  // 64 MiB

// 64 MiB of parameters; a step touches one of them.
struct BigModel {
  std::vector<double> parameters = std::vector<double>(state_doubles, 0.5);
  std::int64_t step = 0;

  void run() {
    parameters[static_cast<std::size_t>(step) % parameters.size()] += 1.0;
    ++step;
  }
  std::int64_t global_step() const { return step; }

  struct Snapshot {
    std::vector<double> parameters;
    std::int64_t step;
    void write(const fs::path& prefix) const {
      runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
      out.add("parameters", parameters);
      out.add("global_step", step);
      out.close();
    }
  };
  void save(const fs::path& prefix) const { Snapshot{parameters, step}.write(prefix); }
  void restore(const fs::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    in.read("parameters", parameters);
    step = in.scalar<std::int64_t>("global_step");
  }
};

// The same model, with snapshot(): saved on a background thread. The snapshot is a fresh copy,
// so the step also pays for mapping 64 MiB of new pages (and the collecting step for freeing them).
struct SnapshottingModel : BigModel {
  Snapshot snapshot() const { return Snapshot{parameters, step}; }
};

// The same, copying into a buffer it keeps between saves: with at most one save in flight, the
// buffer the previous snapshot used is free again by the next one, so the step pays for a plain
// memcpy into pages already mapped.
struct RecyclingModel : BigModel {
  struct Shared {
    std::shared_ptr<const std::vector<double>> parameters;
    std::int64_t step;
    void write(const fs::path& prefix) const {
      runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
      out.add("parameters", *parameters);
      out.add("global_step", step);
      out.close();
    }
  };
  std::shared_ptr<std::vector<double>> buffer = std::make_shared<std::vector<double>>();
  Shared snapshot() {
    if (buffer.use_count() > 1) buffer = std::make_shared<std::vector<double>>();  // still in use
    buffer->assign(parameters.begin(), parameters.end());
    return Shared{buffer, step};
  }
};
static_assert(!runhooks::Snapshottable<BigModel> && runhooks::Snapshottable<SnapshottingModel> &&
              runhooks::Snapshottable<RecyclingModel>);

struct TempDir {
  fs::path path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                        "/runhooks-bench-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class Model>
void save_stall(benchmark::State& state) {
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  TempDir dir;
  const std::string where = dir.path.string();
  // From a factory: the model is built in place (GCC 12 warns, wrongly, about moving it in).
  runhooks::MonitoredSession session{
      [] { return Model{}; },
      runhooks::CheckpointSaverHook({.checkpoint_dir = where, .save_steps = 2, .max_to_keep = 2})};
  auto& hook = session.template hook<0>();
  double plain = 0.0, written = 0.0;
  for (auto _ : state) {
    const auto settle = std::chrono::steady_clock::now();
    while (hook.save_in_flight() && !hook.save_in_flight_finished()) std::this_thread::yield();
    written += seconds_since(settle);
    const auto odd = std::chrono::steady_clock::now();
    session.run();  // saves nothing; collects the finished background save
    plain += seconds_since(odd);
    const auto start = std::chrono::steady_clock::now();
    session.run();  // triggers the save
    state.SetIterationTime(seconds_since(start));
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["plain_step_ms"] = 1000.0 * plain / n;
  if constexpr (runhooks::Snapshottable<Model>) state.counters["write_ms"] = 1000.0 * written / n;
  if constexpr (std::is_same_v<Model, BigModel>)
    state.SetLabel("sync: write, fsync, commit in the step");
  else if constexpr (std::is_same_v<Model, SnapshottingModel>)
    state.SetLabel("async: a fresh copy, then a background thread");
  else
    state.SetLabel("async: a copy into a reused buffer, then a background thread");
}

BENCHMARK_TEMPLATE(save_stall, BigModel)->Name("checkpoint_64MiB/sync")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, SnapshottingModel)->Name("checkpoint_64MiB/async")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, RecyclingModel)->Name("checkpoint_64MiB/async_reused_buffer")->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
