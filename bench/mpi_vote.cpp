// What one stop decision for all ranks costs per step: MpiStopVoteHook's rhythms side by side, in
// one run, against a session without a vote. Run it under mpirun, e.g.
//   mpirun -np 4 build/h-mpi/bench/bench_mpi_vote --rounds 7
// Each step is a calibrated busy loop of --step-us microseconds of CPU time (1.5 and 15 by
// default), alone ("compute": the ranks are otherwise independent, like asynchronous workers) or
// followed by an 8-byte MPI_Allreduce ("data-parallel": the ranks are already in lockstep, as with
// a gradient allreduce). Every configuration is measured once per round, the rounds interleaved.
// Wall time per step is the slowest rank's over about --secs seconds of steps. The table gives
// each configuration's best round, the vote's cost per step as the difference of best rounds (on
// a shared machine the best round is the one least disturbed), and, paired by round, the median
// and spread of the difference to the session without a vote.

#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_stop_vote_hook.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

[[gnu::noinline]] double work(std::int64_t iterations) {
  double x = 1.0;
  for (std::int64_t i = 0; i < iterations; ++i) {
    x = x * 1.0000001 + 1e-9;
    asm volatile("" : "+x"(x));  // one dependent multiply-add per iteration, never folded
  }
  return x;
}

double thread_cpu_secs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Iterations of work() per microsecond of CPU time, the mean over ranks (each timed in CPU time,
// so a rank that waits for a core does not count the wait).
double calibrate() {
  constexpr std::int64_t n = 20'000'000;
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double t0 = thread_cpu_secs();
    volatile double sink = work(n);
    (void)sink;
    best = std::min(best, thread_cpu_secs() - t0);
  }
  double mine = static_cast<double>(n) / (best * 1e6), sum = 0.0;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / runhooks::MpiEnvironment::size();
}

struct Backend {
  std::int64_t iterations;
  bool allreduce;
  std::int64_t step = 0;
  double sink = 0.0;
  void run() {
    sink += work(iterations);
    if (allreduce) {
      double mine = sink, sum = 0.0;
      MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

struct Variant {
  std::string name;
  std::optional<runhooks::MpiStopVoteOptions> vote;  // none: no vote
};

// Votes per step of the last measurement (the vote hook's own count: exact, the same on every
// rank).
double votes_per_step = 0.0;

// Seconds per step: the slowest rank's wall time for `steps` steps.
double measure(const Backend& backend, const Variant& variant, std::int64_t steps) {
  MPI_Barrier(MPI_COMM_WORLD);
  double elapsed = 0.0;
  if (variant.vote) {
    runhooks::MonitoredSession session(backend, runhooks::StopAtStepHook({.last_step = steps}),
                                       runhooks::MpiStopVoteHook(*variant.vote));
    const double t0 = MPI_Wtime();
    while (!session.should_stop()) session.run();
    elapsed = MPI_Wtime() - t0;
    session.close();
    votes_per_step = static_cast<double>(session.hook<runhooks::MpiStopVoteHook>().rounds()) /
                     static_cast<double>(steps);
  } else {
    votes_per_step = 0.0;
    runhooks::MonitoredSession session(backend, runhooks::StopAtStepHook({.last_step = steps}));
    const double t0 = MPI_Wtime();
    while (!session.should_stop()) session.run();
    elapsed = MPI_Wtime() - t0;
  }
  double slowest = 0.0;
  MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest / static_cast<double>(steps);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

[[noreturn]] void usage_error(const std::string& message) {
  if (runhooks::MpiEnvironment::rank() == 0)
    std::fprintf(stderr,
                 "bench_mpi_vote: %s\nusage: mpirun -np N bench_mpi_vote [--rounds R] [--secs S] "
                 "[--step-us US]... [--quick]\n",
                 message.c_str());
  MPI_Finalize();
  std::exit(2);
}

double positive_number(const char* option, const char* text) {
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value > 0.0) || value > 1e6)
    usage_error(std::string(option) + " must be a number greater than 0 and at most 1e6, got '" +
                text + "'");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  int rounds = 7;
  double secs = 0.25;
  std::vector<double> step_us;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--rounds") {
      rounds = static_cast<int>(positive_number("--rounds", value()));
    } else if (arg == "--secs") {
      secs = positive_number("--secs", value());
    } else if (arg == "--step-us") {
      step_us.push_back(positive_number("--step-us", value()));
    } else if (arg == "--quick") {  // a smoke test: one short round
      rounds = 1;
      secs = 0.02;
    } else {
      usage_error("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (step_us.empty()) step_us = {1.5, 15.0};

  const int size = env.size();
  const double per_us = calibrate();
  const std::vector<Variant> variants = {
      {"no vote", std::nullopt},
      {"blocking MPI_Allreduce every step", runhooks::MpiStopVoteOptions{.every_n_steps = 1}},
      {"one MPI_Iallreduce in flight", {{.every_n_steps = 1, .pipelined = true}}},
      {"blocking, every 8 steps", {{.every_n_steps = 8}}},
      {"blocking, every 64 steps", {{.every_n_steps = 64}}},
      {"blocking, every ~10 ms (default)", runhooks::MpiStopVoteOptions{}},
  };
  const char* kinds[] = {"compute", "data-parallel"};

  // Steps per measurement: about --secs of the session without a vote (measured once here, the
  // same number on every rank since measure() returns the slowest rank's time).
  std::vector<std::vector<std::int64_t>> steps_for(step_us.size(), std::vector<std::int64_t>(2));
  for (std::size_t s = 0; s < step_us.size(); ++s)
    for (int kind = 0; kind < 2; ++kind) {
      const Backend backend{static_cast<std::int64_t>(step_us[s] * per_us), kind == 1};
      const auto probe = std::max<std::int64_t>(
          100, static_cast<std::int64_t>(0.2 * secs / (step_us[s] * 1e-6)));
      const double per_step = measure(backend, variants[0], probe);
      steps_for[s][static_cast<std::size_t>(kind)] =
          std::max<std::int64_t>(100, static_cast<std::int64_t>(secs / per_step));
    }

  // results[step][kind][variant][round] = seconds per step; votes likewise, votes per step
  std::vector<std::vector<std::vector<std::vector<double>>>> results(
      step_us.size(), std::vector<std::vector<std::vector<double>>>(
                          2, std::vector<std::vector<double>>(variants.size())));
  auto votes = results;
  for (int round = 0; round < rounds; ++round)
    for (std::size_t s = 0; s < step_us.size(); ++s)
      for (int kind = 0; kind < 2; ++kind)
        for (std::size_t v = 0; v < variants.size(); ++v) {
          const Backend backend{static_cast<std::int64_t>(step_us[s] * per_us), kind == 1};
          const std::int64_t steps = steps_for[s][static_cast<std::size_t>(kind)];
          results[s][static_cast<std::size_t>(kind)][v].push_back(
              measure(backend, variants[v], steps));
          votes[s][static_cast<std::size_t>(kind)][v].push_back(votes_per_step);
        }

  if (env.rank() != 0) return 0;
  std::printf("%d ranks, %d rounds of %.2f s per configuration; work calibrated at %.1f "
              "iterations/us\n\n",
              size, rounds, secs, per_us);
  std::printf("| ranks | step (CPU) | step kind | vote | votes per 1000 steps | wall per step, us "
              "(best round) | vote cost per step, us: best rounds | %% of the step | paired by "
              "round: median [min, max] |\n|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t s = 0; s < step_us.size(); ++s)
    for (std::size_t kind = 0; kind < 2; ++kind) {
      const auto& base = results[s][kind][0];
      const double base_best = *std::min_element(base.begin(), base.end());
      for (std::size_t v = 0; v < variants.size(); ++v) {
        const auto& mine = results[s][kind][v];
        const double best = *std::min_element(mine.begin(), mine.end());
        if (v == 0) {
          std::printf("| %d | %.1f us | %s | %s | 0 | %.2f | — | — | — |\n", size, step_us[s],
                      kinds[kind], variants[v].name.c_str(), best * 1e6);
          continue;
        }
        std::vector<double> extra;
        for (std::size_t r = 0; r < mine.size(); ++r) extra.push_back((mine[r] - base[r]) * 1e6);
        const double cost = (best - base_best) * 1e6;
        std::printf("| %d | %.1f us | %s | %s | %.1f | %.2f | %+.2f | %+.1f %% | %+.2f [%+.2f, %+.2f] "
                    "|\n",
                    size, step_us[s], kinds[kind], variants[v].name.c_str(),
                    1000.0 * median(votes[s][kind][v]), best * 1e6, cost,
                    100.0 * cost / step_us[s], median(extra),
                    *std::min_element(extra.begin(), extra.end()),
                    *std::max_element(extra.begin(), extra.end()));
      }
    }
  return 0;
}
