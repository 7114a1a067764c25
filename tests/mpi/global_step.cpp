// MpiGlobalStep under mpirun -np 4: increments from every rank are atomic (each value is handed
// out once), a store is seen by all, a session with StopAtStepHook and StepCounterHook costs one
// RMA operation per step (the increment; global_step() is the cached value), and a wait honours
// its deadline and its stop token.

#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_global_step.hpp>

#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stop_token>
#include <string_view>
#include <vector>

#include "mpi_check.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  std::int64_t own_steps = 0;
  std::int64_t last_value = 0;
  std::int64_t value_before_last = 0;
};

struct Worker {
  runhooks::MpiGlobalStep* shared;
  Record* record;
  void run() {
    record->value_before_last = record->last_value;
    record->last_value = shared->increment();
    ++record->own_steps;
  }
  std::int64_t global_step() const { return shared->cached(); }
};

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const int rank = env.rank(), size = env.size();
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});

  {  // Atomic increments: the values handed out are exactly start+1 ... start+size*n.
    constexpr std::int64_t start = 100, n = 2000;
    runhooks::MpiGlobalStep step(MPI_COMM_WORLD, start);
    MPI_CHECK(step.cached() == start);
    MPI_CHECK(step.load() == start);
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has read it before anyone increments
    std::vector<std::int64_t> seen(n);
    for (std::int64_t& value : seen) value = step.increment();
    MPI_CHECK(std::is_sorted(seen.begin(), seen.end()));
    MPI_CHECK(step.cached() == seen.back());
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_CHECK(step.load() == start + size * n);
    MPI_CHECK(step.rma_operations() == 1 + n + 1);  // load, increments, load
    std::vector<std::int64_t> all(static_cast<std::size_t>(size * n));
    MPI_Gather(seen.data(), static_cast<int>(n), MPI_INT64_T, all.data(), static_cast<int>(n),
               MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::sort(all.begin(), all.end());
      for (std::size_t i = 0; i < all.size(); ++i)
        MPI_CHECK(all[i] == start + 1 + static_cast<std::int64_t>(i));
    }
  }

  {  // A store by rank 0 is what everyone loads.
    runhooks::MpiGlobalStep step;
    if (rank == 0) step.store(42);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_CHECK(step.load() == 42);
  }

  {  // A session: one RMA operation per step, whatever the hooks read.
    constexpr std::int64_t last_step = 4000;
    runhooks::MpiGlobalStep step;
    Record worker;
    {
      runhooks::MonitoredSession session(Worker{&step, &worker},
                                         runhooks::StopAtStepHook({.last_step = last_step}),
                                         runhooks::StepCounterHook({.every_n_steps = 100}));
      runhooks::run_loop(session);
    }
    const std::int64_t operations = step.rma_operations();
    MPI_CHECK(worker.own_steps > 0);
    MPI_CHECK(operations == worker.own_steps);  // the increments, and nothing else
    // Each rank stopped at its first own step whose increment reached the last step.
    MPI_CHECK(worker.last_value >= last_step);
    MPI_CHECK(worker.own_steps == 1 || worker.value_before_last < last_step);
    std::int64_t total = 0;
    MPI_Allreduce(&worker.own_steps, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_CHECK(step.load() == total);
    MPI_CHECK(total >= last_step && total < last_step + size);
    if (rank == 0)
      std::printf("session: %lld steps on rank 0, %lld RMA operations (%.3f per step)\n",
                  static_cast<long long>(worker.own_steps),
                  static_cast<long long>(operations),
                  static_cast<double>(operations) /
                      static_cast<double>(worker.own_steps));
  }

  {  // Waits: a deadline that passes, a stop already requested, a target already reached.
    runhooks::MpiGlobalStep step;
    const auto t0 = Clock::now();
    const std::int64_t value =
        step.wait_for_global_step(10, {}, t0 + std::chrono::milliseconds(20));
    const auto waited = Clock::now() - t0;
    MPI_CHECK(value == 0);
    MPI_CHECK(waited >= std::chrono::milliseconds(20));
    MPI_CHECK(waited < std::chrono::seconds(5));
    std::stop_source stop;
    stop.request_stop();
    const auto t1 = Clock::now();
    MPI_CHECK(step.wait_for_global_step(10, stop.get_token(), t1 + std::chrono::hours(1)) == 0);
    MPI_CHECK(Clock::now() - t1 < std::chrono::seconds(5));
    MPI_CHECK(step.wait_for_global_step(0, {}, t1 + std::chrono::hours(1)) == 0);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  {  // Bad input names the option and the value.
    bool threw = false;
    try {
      runhooks::MpiGlobalStepOptions{.max_poll_interval_secs = 0.0}.validate();
    } catch (const std::invalid_argument& e) {
      threw = std::string_view(e.what()).find("max_poll_interval_secs") != std::string_view::npos &&
              std::string_view(e.what()).find("got 0") != std::string_view::npos;
    }
    MPI_CHECK(threw);
  }

  return mpi_check_result("mpi_global_step");
}
