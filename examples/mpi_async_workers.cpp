// Asynchronous workers as in TensorFlow's parameter-server training, on MPI: the demo's logistic
// regression (examples/logistic_regression.hpp) with its weights in an RMA window on rank 0 and a
// global step shared by all ranks (MpiGlobalStep). Each worker, at its own pace, reads the
// weights, computes a gradient on a mini-batch of its own shard and adds its update to them, then
// increments the global step: no collective, no lockstep (Hogwild-style, as TensorFlow's
// asynchronous replicas).
//
//   ./dev demo-mpi                                    # configures build/demo-mpi
//   ninja -C build/demo-mpi examples/mpi_async_workers
//   mpirun -np 4 build/demo-mpi/examples/mpi_async_workers [--last-step N] [--stagger K]
//
// (mpirun wants --oversubscribe on fewer than 4 cores, --allow-run-as-root as root.)
//
// As GlobalStepWaiterHook's docstring suggests, worker k starts once the global step reaches
// int(K * log(k + 1)): the chief (k = 0) at once, the others one after another, each woken
// within a fraction of a millisecond by the shared step (TensorFlow polls every 0.5 s). Every
// worker stops at the first of its steps that takes the global step to --last-step or beyond
// (StopAtStepHook), so all stop within one step of each other. The program checks what it
// claims and fails otherwise.

#include "logistic_regression.hpp"

#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_global_step.hpp>

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

namespace {

using demo::Example;
using demo::num_features;
using demo::Weights;

// The weights in a window on rank 0, read and updated by passive-target RMA: MPI_Get_accumulate
// with MPI_NO_OP to read (atomic per element), MPI_Accumulate with MPI_SUM to add an update.
class ParameterServer {
 public:
  ParameterServer() {
    const int rank = runhooks::MpiEnvironment::rank();
    const MPI_Aint bytes = rank == 0 ? MPI_Aint{sizeof(double) * (num_features + 1)} : 0;
    runhooks::detail::mpi_check(MPI_Win_allocate(bytes, sizeof(double), MPI_INFO_NULL,
                                                 MPI_COMM_WORLD, &base_, &window_),
                                "MPI_Win_allocate");
    if (rank == 0)
      for (std::size_t j = 0; j <= num_features; ++j) base_[j] = 0.0;
    MPI_Win_lock_all(MPI_MODE_NOCHECK, window_);
    MPI_Win_sync(window_);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;
  ~ParameterServer() {
    MPI_Win_unlock_all(window_);
    MPI_Win_free(&window_);
  }

  Weights read() {
    Weights w{};
    MPI_Get_accumulate(nullptr, 0, MPI_DOUBLE, w.data(), static_cast<int>(w.size()), MPI_DOUBLE,
                       0, 0, static_cast<int>(w.size()), MPI_DOUBLE, MPI_NO_OP, window_);
    MPI_Win_flush(0, window_);
    return w;
  }
  void add(const Weights& update) {
    MPI_Accumulate(update.data(), static_cast<int>(update.size()), MPI_DOUBLE, 0, 0,
                   static_cast<int>(update.size()), MPI_DOUBLE, MPI_SUM, window_);
    MPI_Win_flush(0, window_);
  }

 private:
  double* base_ = nullptr;
  MPI_Win window_ = MPI_WIN_NULL;
};

struct Record {
  std::optional<std::int64_t> first_seen;  // the global step before this worker's first step
  std::int64_t steps = 0;
  std::int64_t last_step_value = 0;  // the global step its last increment returned
};

// One worker: a step reads the weights, computes a mini-batch gradient, adds the update and
// increments the global step (three RMA operations).
struct AsyncWorker {
  ParameterServer* server;
  runhooks::MpiGlobalStep* global;
  const std::vector<Example>* shard;
  std::mt19937* rng;
  Record* record;

  void run() {
    if (!record->first_seen) record->first_seen = global->cached();
    const Weights w = server->read();
    std::uniform_int_distribution<std::size_t> pick(0, shard->size() - 1);
    constexpr std::size_t batch = 16;
    Weights update{};
    for (std::size_t i = 0; i < batch; ++i) {
      const Example& e = (*shard)[pick(*rng)];
      const double error = demo::sigmoid(demo::logit(w, e)) - e.label;
      for (std::size_t j = 0; j < num_features; ++j) update[j] -= 0.05 * error * e.x[j] / batch;
      update[num_features] -= 0.05 * error / batch;
    }
    server->add(update);
    record->last_step_value = global->increment();
    ++record->steps;
  }
  std::int64_t global_step() const { return global->cached(); }  // no read: TF's stale step
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    std::chrono::steady_clock::time_point deadline) {
    return global->wait_for_global_step(target, stop, deadline);
  }
};
static_assert(runhooks::WaitableGlobalStep<AsyncWorker>);

[[noreturn]] void usage_error(const std::string& message) {
  if (runhooks::MpiEnvironment::rank() == 0)
    std::fprintf(stderr, "mpi_async_workers: %s\nusage: mpirun -np N mpi_async_workers "
                         "[--last-step N] [--stagger K]\n", message.c_str());
  MPI_Finalize();
  std::exit(2);
}

std::int64_t parse_count(std::string_view option, const char* text) {
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > 1'000'000'000)
    usage_error(std::string(option) + " must be an integer from 0 to 1e9, got '" + text + "'");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const int rank = env.rank(), ranks = env.size();
  std::int64_t last_step = 20000, stagger = 1000;
  for (int i = 1; i < argc; i += 2) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    if (arg == "--last-step")
      last_step = parse_count(arg, argv[i + 1]);
    else if (arg == "--stagger")
      stagger = parse_count(arg, argv[i + 1]);
    else
      usage_error("unknown argument '" + std::string(arg) + "'");
  }
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});

  return runhooks::mpi_run_or_abort([&] {
    const Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
    std::mt19937 data_rng(2024);
    const std::vector<Example> data = demo::make_data(true_weights, 4000, data_rng);
    std::vector<Example> shard;
    for (std::size_t i = static_cast<std::size_t>(rank); i < data.size();
         i += static_cast<std::size_t>(ranks))
      shard.push_back(data[i]);

    ParameterServer server;
    runhooks::MpiGlobalStep global;
    std::mt19937 rng(7u + static_cast<unsigned>(rank));
    Record record;
    const auto threshold =
        static_cast<std::int64_t>(static_cast<double>(stagger) * std::log(rank + 1.0));
    const auto start = std::chrono::steady_clock::now();
    {
      runhooks::MonitoredSession session(AsyncWorker{&server, &global, &shard, &rng, &record},
                                         runhooks::GlobalStepWaiterHook(threshold),
                                         runhooks::StopAtStepHook({.last_step = last_step}));
      runhooks::run_loop(session);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MPI_Barrier(MPI_COMM_WORLD);  // every worker done: the window holds the final weights
    const Weights learned = server.read();
    const std::int64_t final_step = global.load();

    // The claims.
    bool ok = record.first_seen.has_value() && *record.first_seen >= threshold;
    if (!ok) std::fprintf(stderr, "FAILED: worker %d started before global step %lld\n", rank,
                          static_cast<long long>(threshold));
    if (record.last_step_value < last_step) {
      std::fprintf(stderr, "FAILED: worker %d stopped before the last step\n", rank);
      ok = false;
    }
    std::int64_t total = 0;
    MPI_Allreduce(&record.steps, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && (total != final_step || final_step < last_step ||
                      final_step >= last_step + ranks)) {
      std::fprintf(stderr, "FAILED: global step %lld after %lld steps in all (last_step %lld)\n",
                   static_cast<long long>(final_step), static_cast<long long>(total),
                   static_cast<long long>(last_step));
      ok = false;
    }
    std::vector<long long> rows(4 * static_cast<std::size_t>(ranks));
    const long long mine[4] = {static_cast<long long>(threshold),
                               static_cast<long long>(record.first_seen.value_or(-1)),
                               static_cast<long long>(record.steps),
                               static_cast<long long>(record.last_step_value)};
    MPI_Gather(mine, 4, MPI_LONG_LONG, rows.data(), 4, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::printf("worker  waits for  first step at  own steps  stopped at\n");
      for (int r = 0; r < ranks; ++r) {
        const long long* row = &rows[4 * static_cast<std::size_t>(r)];
        std::printf("%6d  %9lld  %13lld  %9lld  %10lld\n", r, row[0], row[1], row[2], row[3]);
      }
      const double accuracy = demo::accuracy(learned, data);
      const double best = demo::accuracy(true_weights, data);
      std::printf("global step %lld (last_step %lld) in %.2f s; accuracy %.3f (the true "
                  "weights: %.3f)\n",
                  static_cast<long long>(final_step), static_cast<long long>(last_step), secs,
                  accuracy, best);
      if (last_step >= 5000 && !(accuracy > 0.8 && accuracy > best - 0.03)) {
        std::fprintf(stderr, "FAILED: the model did not learn\n");
        ok = false;
      }
    }
    int failed = ok ? 0 : 1, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%s\n", any ? "FAILED" : "OK");
    return any;
  });
}
