// GlobalStepWaiterHook across processes, on an MpiGlobalStep, under mpirun -np 4: workers start
// staggered and never before their threshold; a waiting worker wakes soon after the step is
// reached (measured: steady_clock is the machine's CLOCK_MONOTONIC, the same in every process of
// one machine); a stopped coordinator ends the wait (StopIteration: a clean end) and a timeout
// ends it with DeadlineExceededError.

#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_global_step.hpp>

#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stop_token>
#include <string_view>
#include <thread>
#include <vector>

#include "mpi_check.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  std::optional<std::int64_t> first_seen;  // the global step this rank saw before its first step
  std::int64_t steps = 0;
};

struct Worker {
  runhooks::MpiGlobalStep* shared;
  Record* record;
  void run() {
    if (!record->first_seen) record->first_seen = shared->cached();
    shared->increment();
    ++record->steps;
  }
  std::int64_t global_step() const { return shared->cached(); }
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    Clock::time_point deadline) {
    return shared->wait_for_global_step(target, stop, deadline);
  }
};
static_assert(runhooks::WaitableGlobalStep<Worker>);

// The time of the first before_run that gets past the waiter (listed after it).
struct WakeTime {
  std::optional<Clock::time_point>* woke;
  template <class Ctx>
  void before_run(Ctx&) {
    if (!*woke) *woke = Clock::now();
  }
};

// Stops the coordinator from one of its threads after a delay.
struct StopCoordinatorAfter {
  std::chrono::milliseconds delay;
  template <class B>
  void after_create_session(B&, runhooks::Coordinator& coord) {
    coord.start([&coord, d = delay](std::stop_token stop) {
      const auto until = Clock::now() + d;
      while (!stop.stop_requested() && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      coord.request_stop();
    });
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const int rank = env.rank(), size = env.size();
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});

  {  // Staggered start: rank k waits for global step 300 k; all stop at 3000.
    runhooks::MpiGlobalStep step;
    Record record;
    const std::int64_t threshold = 300 * rank;
    {
      runhooks::MonitoredSession session(Worker{&step, &record},
                                         runhooks::GlobalStepWaiterHook(threshold),
                                         runhooks::StopAtStepHook({.last_step = 3000}));
      runhooks::run_loop(session);
    }
    MPI_CHECK(record.first_seen.has_value());
    MPI_CHECK(record.first_seen.value_or(-1) >= threshold);
    MPI_CHECK(step.cached() >= 3000);
    std::int64_t total = 0;
    MPI_Allreduce(&record.steps, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_CHECK(step.load() == total);
    MPI_Barrier(MPI_COMM_WORLD);
  }

  {  // Wake latency: rank 0 sets the step to the target at a known instant; the others wait.
    constexpr int trials = 20;
    constexpr std::int64_t target = 1000;
    std::vector<double> latencies_us;
    for (int trial = 0; trial < trials; ++trial) {
      runhooks::MpiGlobalStep step;
      std::int64_t reached_ns = 0;
      std::optional<Clock::time_point> woke;
      if (rank == 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the others are waiting
        reached_ns = Clock::now().time_since_epoch().count();
        step.store(target);
      } else {
        Record record;
        runhooks::MonitoredSession session(Worker{&step, &record},
                                           runhooks::GlobalStepWaiterHook(target),
                                           WakeTime{&woke},
                                           runhooks::StopAtStepHook({.last_step = target}));
        MPI_Barrier(MPI_COMM_WORLD);
        session.run();  // waits in the waiter's before_run
      }
      MPI_Bcast(&reached_ns, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
      if (rank != 0) {
        MPI_CHECK(woke.has_value());
        if (woke)
          latencies_us.push_back(
              static_cast<double>(woke->time_since_epoch().count() - reached_ns) * 1e-3);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    double mine[2] = {0.0, 0.0};  // median, max
    if (rank != 0) {
      mine[0] = median(latencies_us);
      mine[1] = *std::max_element(latencies_us.begin(), latencies_us.end());
      MPI_CHECK(*std::min_element(latencies_us.begin(), latencies_us.end()) >= 0.0);
    }
    std::vector<double> all(2 * static_cast<std::size_t>(size));
    MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::vector<double> medians;
      for (int r = 1; r < size; ++r) {
        std::printf("wake latency, rank %d: median %.0f us, max %.0f us over %d trials\n", r,
                    all[2 * static_cast<std::size_t>(r)],
                    all[2 * static_cast<std::size_t>(r) + 1], trials);
        medians.push_back(all[2 * static_cast<std::size_t>(r)]);
      }
      // The goal is under 1 ms (TensorFlow polls every 0.5 s); 10 ms leaves room for a loaded
      // machine while still failing a waiter that sleeps through a poll interval of its own.
      MPI_CHECK(*std::max_element(medians.begin(), medians.end()) < 10'000.0);
    }
  }

  {  // A stopped coordinator ends the wait: StopIteration, a clean end of run_loop.
    runhooks::MpiGlobalStep step;
    Record record;
    const auto t0 = Clock::now();
    runhooks::MonitoredSession session(Worker{&step, &record},
                                       runhooks::GlobalStepWaiterHook(1'000'000),
                                       StopCoordinatorAfter{std::chrono::milliseconds(100)});
    bool ended_cleanly = false;
    try {
      runhooks::run_loop(session);
      ended_cleanly = true;
    } catch (...) {
    }
    const auto waited = Clock::now() - t0;
    MPI_CHECK(ended_cleanly);
    MPI_CHECK(record.steps == 0);
    MPI_CHECK(waited >= std::chrono::milliseconds(100));
    MPI_CHECK(waited < std::chrono::seconds(5));
    MPI_Barrier(MPI_COMM_WORLD);
  }

  {  // A timeout ends it with DeadlineExceededError.
    runhooks::MpiGlobalStep step;
    Record record;
    const auto t0 = Clock::now();
    runhooks::MonitoredSession session(
        Worker{&step, &record},
        runhooks::GlobalStepWaiterHook(1'000'000, {.timeout_secs = 0.05}));
    bool deadline = false;
    try {
      session.run();
    } catch (const runhooks::DeadlineExceededError&) {
      deadline = true;
    }
    const auto waited = Clock::now() - t0;
    MPI_CHECK(deadline);
    MPI_CHECK(waited >= std::chrono::milliseconds(50));
    MPI_CHECK(waited < std::chrono::seconds(5));
    MPI_Barrier(MPI_COMM_WORLD);
  }

  return mpi_check_result("mpi_global_step_waiter");
}
