// How long the step that triggers a checkpoint stalls, for a synchronous save and for the
// asynchronous ones, of the same 64 MiB state, side by side in one run, against the floor: a
// memcpy of those 64 MiB into a buffer kept between iterations (`memcpy_reused_buffer`, and
// `memcpy_reused_buffer_evicted` after writing 64 MiB elsewhere, as a saving step finds the caches).
//   async                 the library's default: SnapshottableInPlace, the backend copies into
//                         the snapshot CheckpointSaverHook keeps (std::vector::assign)
//   async_fresh_copy      SnapshottableByValue, `Snapshot{parameters, step}`: a new vector per
//                         save, whose pages the step maps (what the library asked for before)
//   async_reused_buffer   by value, with a buffer the backend recycles itself
//   sync                  save() inside the step: write, fsync, commit
// One iteration is one such step (manual time: only that step is timed); between iterations the
// previous background save is let finish and a step that saves nothing collects it, so no save
// is in flight when the timed step starts. The counters give, in milliseconds, the mean of what a
// step costs when no save triggers (`plain_step_ms`), the CPU time of the timed step's thread
// (`step_cpu_ms`: unlike the wall time, not inflated when a loaded machine leaves the thread
// waiting for a core) and, for the asynchronous saves, the time the background write and commit
// took (`write_ms`). Each iteration also times the floor, a memcpy of the model's parameters into
// a buffer mapped before, with the caches in the same state as for the step (`memcpy_ms`), and
// the counters `x_memcpy` and `x_memcpy_cpu` are the step's wall and CPU time over the floor's,
// summed over the iterations: a ratio within the same seconds of a shared machine. The checkpoints go to $TMPDIR (or /tmp);
// every save is fsynced, so the numbers depend on that disk. Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N: the repetitions of all
// of them interleave, so a machine busy with other work slows each alike; compare medians.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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
#include <time.h>

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

// The same model with the in-place snapshot: the hook keeps one Snapshot and hands it back at
// every save, so the copy lands in pages mapped since the first save (at session creation).
struct InPlaceModel : BigModel {
  void snapshot(Snapshot& into) const {
    into.parameters.assign(parameters.begin(), parameters.end());
    into.step = step;
  }
};

// The same model, with snapshot() by value: a fresh copy, so the step also pays for mapping
// 64 MiB of new pages (and the collecting step for freeing them).
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
static_assert(!runhooks::Snapshottable<BigModel> && runhooks::SnapshottableInPlace<InPlaceModel> &&
              !runhooks::SnapshottableInPlace<SnapshottingModel> &&
              runhooks::SnapshottableByValue<SnapshottingModel> &&
              !runhooks::SnapshottableInPlace<RecyclingModel>);

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

// The CPU time of the calling thread, page faults included (kernel time): unlike the wall
// clock, it does not count the time a loaded machine leaves the thread waiting for a core.
double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
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
  // The floor, paired: in every iteration, a memcpy of the model's parameters into a buffer
  // mapped here, timed like the step and in the same state of the caches (both after 64 MiB
  // written elsewhere, as the previous save's background write leaves them), so that the ratio
  // holds however the load of a shared machine drifts between repetitions.
  std::vector<double> floor_buffer(state_doubles, 0.0), other(state_doubles, 0.0);
  const auto evict = [&] {
    for (double& x : other) x += 1.0;
    benchmark::ClobberMemory();
  };
  double plain = 0.0, written = 0.0, cpu = 0.0, wall = 0.0, floor_wall = 0.0, floor_cpu = 0.0;
  for (auto _ : state) {
    const auto settle = std::chrono::steady_clock::now();
    // The previous save done, background parts included: its write (async) or the deletion of
    // the checkpoint it dropped (sync), as the steps between two saves leave it in training.
    // Polled with a sleep, not a yield: a thread spinning on sched_yield runs up its share of the
    // CPU and is then the first to be preempted during the timed step on a loaded machine.
    while ((hook.save_in_flight() && !hook.save_in_flight_finished()) || hook.manager().deleting())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    written += seconds_since(settle);
    const auto odd = std::chrono::steady_clock::now();
    session.run();  // saves nothing; collects the finished background save
    plain += seconds_since(odd);
    evict();
    const auto floor_start = std::chrono::steady_clock::now();
    const double floor_cpu_start = thread_cpu_seconds();
    std::memcpy(floor_buffer.data(), session.raw_session().parameters.data(),
                state_doubles * sizeof(double));
    benchmark::DoNotOptimize(floor_buffer.data());
    benchmark::ClobberMemory();
    floor_cpu += thread_cpu_seconds() - floor_cpu_start;
    floor_wall += seconds_since(floor_start);
    evict();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    session.run();  // triggers the save
    cpu += thread_cpu_seconds() - cpu_start;
    const double step = seconds_since(start);
    wall += step;
    state.SetIterationTime(step);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["plain_step_ms"] = 1000.0 * plain / n;
  state.counters["step_cpu_ms"] = 1000.0 * cpu / n;
  state.counters["memcpy_ms"] = 1000.0 * floor_wall / n;
  state.counters["x_memcpy"] = wall / floor_wall;
  state.counters["x_memcpy_cpu"] = cpu / floor_cpu;
  if constexpr (runhooks::Snapshottable<Model>) state.counters["write_ms"] = 1000.0 * written / n;
  if constexpr (std::is_same_v<Model, BigModel>)
    state.SetLabel("sync: write, fsync, commit in the step");
  else if constexpr (std::is_same_v<Model, InPlaceModel>)
    state.SetLabel("async: snapshot(into) the hook's snapshot, then a background thread");
  else if constexpr (std::is_same_v<Model, SnapshottingModel>)
    state.SetLabel("async: a fresh copy, then a background thread");
  else
    state.SetLabel("async: a copy into the backend's own recycled buffer, then a background thread");
}

// The floor: what the copy of the state costs at best, into memory mapped long before.
void memcpy_reused_buffer(benchmark::State& state) {
  const std::vector<double> source(state_doubles, 0.5);
  std::vector<double> buffer(state_doubles, 0.0);  // mapped here, reused by every iteration
  double sink = 0.0;
  double cpu = 0.0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    std::memcpy(buffer.data(), source.data(), state_doubles * sizeof(double));
    benchmark::DoNotOptimize(buffer.data());
    benchmark::ClobberMemory();
    cpu += thread_cpu_seconds() - cpu_start;
    state.SetIterationTime(seconds_since(start));
    sink += buffer[static_cast<std::size_t>(state.iterations()) % state_doubles];
  }
  benchmark::DoNotOptimize(sink);
  state.counters["step_cpu_ms"] = 1000.0 * cpu / static_cast<double>(state.iterations());
  state.SetLabel("the floor: memcpy of the 64 MiB into a buffer mapped before");
}

// The same copy after 64 MiB of other memory was written (untimed), as the background write of
// the previous save leaves the caches before a saving step: with a 32 MiB L3, back-to-back
// copies of the same 64 MiB (above) find part of it cached, which no saving step does.
void memcpy_reused_buffer_evicted(benchmark::State& state) {
  const std::vector<double> source(state_doubles, 0.5);
  std::vector<double> buffer(state_doubles, 0.0);
  std::vector<double> other(state_doubles, 0.0);
  double sink = 0.0;
  double cpu = 0.0;
  for (auto _ : state) {
    for (double& x : other) x += 1.0;
    benchmark::ClobberMemory();
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    std::memcpy(buffer.data(), source.data(), state_doubles * sizeof(double));
    benchmark::DoNotOptimize(buffer.data());
    benchmark::ClobberMemory();
    cpu += thread_cpu_seconds() - cpu_start;
    state.SetIterationTime(seconds_since(start));
    sink += buffer[static_cast<std::size_t>(state.iterations()) % state_doubles] + other[0];
  }
  benchmark::DoNotOptimize(sink);
  state.counters["step_cpu_ms"] = 1000.0 * cpu / static_cast<double>(state.iterations());
  state.SetLabel("the floor, caches as a saving step finds them: 64 MiB written elsewhere first");
}

BENCHMARK(memcpy_reused_buffer)->Name("checkpoint_64MiB/memcpy_reused_buffer")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(memcpy_reused_buffer_evicted)->Name("checkpoint_64MiB/memcpy_reused_buffer_evicted")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, InPlaceModel)->Name("checkpoint_64MiB/async")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, SnapshottingModel)->Name("checkpoint_64MiB/async_fresh_copy")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, RecyclingModel)->Name("checkpoint_64MiB/async_reused_buffer")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, BigModel)->Name("checkpoint_64MiB/sync")->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
