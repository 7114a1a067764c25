// How long the step that triggers a checkpoint of a TorchBackend stalls training, with a model of
// 64 MiB of parameters trained by SGD with momentum (64 MiB of optimizer state more), side by
// side in one run:
//   memcpy_state       the floor: a memcpy of as many bytes as the parameters and the momentum
//                      buffers hold, into a buffer mapped before
//   async              TorchBackend's snapshot(into) (SnapshottableInPlace): Tensor::copy_ of
//                      every parameter, buffer and momentum buffer into the host tensors of the
//                      snapshot the hook keeps; serialized into the .pt archive on the
//                      background thread
//   async_serialized   what TorchBackend's snapshot was before: the whole archive serialized
//                      into memory on the training thread, its bytes written in the background
//   sync               save() inside the step: the archive to a file, fsync, commit
// Only the saving hook's after_run is timed: a hook before it and one after it take the time, so
// the training step itself (forward, backward, the optimizer's update) is not in the figure.
// Between iterations the previous save is let finish (its background write, or the deletion of
// the checkpoint it dropped) and a step that saves nothing collects it. Counters, in ms: the
// background write and commit (`write_ms`), the training step without a save
// (`plain_step_ms`), and the CPU time of the timed part on its thread (`step_cpu_ms`, which a
// loaded machine does not inflate by leaving the thread waiting for a core). Each iteration also
// times a memcpy of the same tensors' bytes into a buffer mapped before, caches in the same state
// (`memcpy_ms`); `x_memcpy` and `x_memcpy_cpu` are the timed part's wall and CPU time over it. The checkpoints go to $TMPDIR (or /tmp), every one fsynced. Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N and compare medians.
#include <benchmark/benchmark.h>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/torch/tensor_batches.hpp>
#include <runhooks/torch/torch_backend.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <stdlib.h>
#include <time.h>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Two layers of 2048 x 4096 float weights: 64 MiB of parameters (and 24 KiB of biases).
constexpr std::int64_t width = 2048, hidden = 4096;

using Model = torch::nn::Sequential;
using Backend = runhooks::TorchBackend<Model, torch::optim::SGD>;

template <class B>
B make_backend() {
  torch::set_num_threads(1);  // a copy on one thread, as the memcpy of the floor
  torch::manual_seed(1);
  torch::Tensor inputs = torch::randn({64, width});
  torch::Tensor targets = torch::randint(0, width, {64});
  return B(Model(torch::nn::Linear(width, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, width)),
           runhooks::TensorBatches(inputs, targets, /*batch_size=*/8, /*seed=*/1),
           torch::optim::SGDOptions(0.01).momentum(0.9));
}

// TorchBackend's snapshot as it was: the archive serialized into memory on the training thread.
// Its own Snapshot and snapshot() hide TorchBackend's, so it is SnapshottableByValue only.
struct SerializingBackend : Backend {
  using Backend::Backend;
  struct Snapshot {
    std::string bytes;
    void write(const fs::path& prefix) const {
      std::ofstream file(checkpoint_file(prefix), std::ios::binary | std::ios::trunc);
      file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      file.close();
      if (!file) throw std::runtime_error("cannot write " + checkpoint_file(prefix).string());
    }
  };
  Snapshot snapshot() {
    torch::serialize::OutputArchive archive;
    torch::serialize::OutputArchive model_archive;
    model()->save(model_archive);
    archive.write("model", model_archive);
    torch::serialize::OutputArchive optimizer_archive;
    optimizer().save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("global_step", c10::IValue(global_step()));
    std::ostringstream bytes;
    archive.save_to(bytes);
    return Snapshot{std::move(bytes).str()};
  }
};
static_assert(runhooks::SnapshottableInPlace<Backend>);
static_assert(runhooks::SnapshottableByValue<SerializingBackend> &&
              !runhooks::SnapshottableInPlace<SerializingBackend>);

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

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The CPU time of the calling thread (bench/checkpoint_stall.cpp says why).
double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Takes the time (wall and the thread's CPU) when its after_run runs: one before the checkpoint
// hook, one after it.
struct Stamp {
  Clock::time_point* at;
  double* cpu;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    *at = Clock::now();
    *cpu = thread_cpu_seconds();
  }
};

// The tensors a snapshot copies: parameters, buffers, momentum buffers.
template <class B>
std::vector<torch::Tensor> state_tensors(B& backend) {
  std::vector<torch::Tensor> tensors;
  for (const torch::Tensor& p : backend.model()->parameters()) tensors.push_back(p);
  for (const torch::Tensor& b : backend.model()->buffers()) tensors.push_back(b);
  for (const auto& item : backend.optimizer().state())
    tensors.push_back(
        static_cast<const torch::optim::SGDParamState&>(*item.second).momentum_buffer());
  return tensors;
}

// Their bytes after a step.
std::size_t state_bytes() {
  Backend backend = make_backend<Backend>();
  backend.run();
  std::size_t bytes = 0;
  for (const torch::Tensor& t : state_tensors(backend)) bytes += t.nbytes();
  return bytes;
}

void memcpy_state(benchmark::State& state) {
  const std::size_t bytes = state_bytes();
  const std::vector<char> source(bytes, 1);
  std::vector<char> buffer(bytes, 0);  // mapped here, reused by every iteration
  double cpu = 0.0;
  for (auto _ : state) {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    std::memcpy(buffer.data(), source.data(), bytes);
    benchmark::DoNotOptimize(buffer.data());
    benchmark::ClobberMemory();
    cpu += thread_cpu_seconds() - cpu_start;
    state.SetIterationTime(seconds(Clock::now() - start));
  }
  state.counters["state_mib"] = static_cast<double>(bytes) / double(1 << 20);
  state.counters["step_cpu_ms"] = 1000.0 * cpu / static_cast<double>(state.iterations());
  state.SetLabel("the floor: memcpy of the parameters' and momentum's bytes, buffer mapped before");
}

template <class B, bool async>
void save_stall(benchmark::State& state) {
  const runhooks::LogSink previous = runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  {
    TempDir dir;
    Clock::time_point before{}, after{};
    double cpu_before = 0.0, cpu_after = 0.0;
    runhooks::MonitoredSession session{
        [] { return make_backend<B>(); }, Stamp{&before, &cpu_before},
        runhooks::CheckpointSaverHook({.checkpoint_dir = dir.path.string(), .save_steps = 2,
                                       .max_to_keep = 2, .async_save = async}),
        Stamp{&after, &cpu_after}};
    auto& hook = session.template hook<1>();
    // The floor, paired (bench/checkpoint_stall.cpp says why): in every iteration a memcpy of
    // the same tensors into a buffer mapped here, the caches first filled with other bytes, as
    // before the step.
    const std::size_t bytes = state_bytes();
    std::vector<char> floor_buffer(bytes, 0), other(bytes, 0);
    const auto evict = [&] {
      for (char& x : other) ++x;
      benchmark::ClobberMemory();
    };
    double written = 0.0, plain = 0.0, cpu = 0.0, wall = 0.0, floor_wall = 0.0, floor_cpu = 0.0;
    for (auto _ : state) {
      const auto settle = Clock::now();
      // Polled with a sleep (bench/checkpoint_stall.cpp says why).
      while ((hook.save_in_flight() && !hook.save_in_flight_finished()) || hook.manager().deleting())
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      written += seconds(Clock::now() - settle);
      const auto odd = Clock::now();
      session.run();  // saves nothing; collects the finished background save
      plain += seconds(Clock::now() - odd);
      evict();
      const std::vector<torch::Tensor> tensors = state_tensors(session.raw_session());
      const auto floor_start = Clock::now();
      const double floor_cpu_start = thread_cpu_seconds();
      std::size_t at = 0;
      for (const torch::Tensor& t : tensors) {
        std::memcpy(floor_buffer.data() + at, t.data_ptr(), t.nbytes());
        at += t.nbytes();
      }
      benchmark::DoNotOptimize(floor_buffer.data());
      benchmark::ClobberMemory();
      floor_cpu += thread_cpu_seconds() - floor_cpu_start;
      floor_wall += seconds(Clock::now() - floor_start);
      evict();
      session.run();  // triggers the save
      state.SetIterationTime(seconds(after - before));
      wall += seconds(after - before);
      cpu += cpu_after - cpu_before;
    }
    const double n = static_cast<double>(state.iterations());
    state.counters["plain_step_ms"] = 1000.0 * plain / n;
    state.counters["step_cpu_ms"] = 1000.0 * cpu / n;
    state.counters["memcpy_ms"] = 1000.0 * floor_wall / n;
    state.counters["x_memcpy"] = wall / floor_wall;
    state.counters["x_memcpy_cpu"] = cpu / floor_cpu;
    if constexpr (async) state.counters["write_ms"] = 1000.0 * written / n;
  }
  runhooks::set_log_sink(previous);
  if constexpr (!async)
    state.SetLabel("sync: torch archive to the file, fsync, commit in the step");
  else if constexpr (std::is_same_v<B, Backend>)
    state.SetLabel("async: copy_ into the kept snapshot's host tensors, serialized in the background");
  else
    state.SetLabel("async, before: the archive serialized in memory in the step");
}

BENCHMARK(memcpy_state)->Name("torch_64MiB_sgd_momentum/memcpy_state")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, Backend, true)->Name("torch_64MiB_sgd_momentum/async")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, SerializingBackend, true)->Name("torch_64MiB_sgd_momentum/async_serialized")->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(save_stall, Backend, false)->Name("torch_64MiB_sgd_momentum/sync")->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
