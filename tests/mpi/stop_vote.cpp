// MpiStopVoteHook under mpirun -np 4: whatever the vote's rhythm, a stop cast on one rank stops
// every rank after the same step, within the rhythm's bound, and every rank takes part in the
// same number of rounds (the same sequence of collectives). Backends in lockstep run a real
// MPI_Allreduce in every step, so a rank that left early would hang the test (meson's timeout
// then fails it). Also: a direct stop under the every-step vote, one every rank requests at the
// same step (StopAtStepHook), a direct or coordinator stop on one rank of asynchronous workers,
// a real signal (SignalStopHook in MpiVoted), MpiChiefOnly, options that differ between ranks, and bad options.
// And max_overhead: votes of a slow engine are spaced to stay about that fraction of the stepping.
// And the guards of issue 27: TimeLimitHook, where the chief's clock decides (its budget spent
// during the run or already at creation; the other ranks' clocks never count), and SpikeHook,
// where any rank's spike stops every rank at the same step.

#include <runhooks/mpi/mpi_chief_only.hpp>
#include <runhooks/mpi/mpi_collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_stop_vote_hook.hpp>

#include <runhooks/coordinator.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/spike_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/hooks/time_limit_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "mpi_check.hpp"

namespace {

int world_rank() { return runhooks::MpiEnvironment::rank(); }

// Data-parallel: every step is a gradient allreduce, so the ranks step in lockstep.
struct LockstepBackend {
  std::int64_t step = 0;
  void run() {
    double gradient = 1.0, sum = 0.0;
    MPI_Allreduce(&gradient, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

struct Loss : runhooks::Key<double> {
  static constexpr std::string_view name = "loss";
};
int spike_rank = -1;          // the rank whose loss spikes,
std::int64_t spike_step = -1;  // at this step

// LockstepBackend with a loss: 1, but 50 on spike_rank at spike_step.
struct SpikyLockstepBackend : LockstepBackend {
  double fetch(Loss) const { return world_rank() == spike_rank && step == spike_step ? 50.0 : 1.0; }
};

// Advances this rank's manual clock after each step.
struct Tick {
  runhooks::ManualClock clock;
  double secs;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    clock.advance(secs);
  }
};

using ManualTimeLimit = runhooks::TimeLimitHook<runhooks::ManualClock>;
static_assert(runhooks::StatefulHook<runhooks::MpiChiefOnly<runhooks::MpiVoted<ManualTimeLimit>>>,
              "the chief's checkpoint carries the wrapped timer's state");

// Asynchronous workers: no collective in the step.
struct AsyncBackend {
  std::int64_t step = 0;
  void run() {
    volatile double sink = 0.0;
    for (int i = 0; i < 200; ++i) sink = sink + 1.0;
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

// A data-parallel step of 20 µs of work (a busy wait: the clock, not the CPU, so an oversubscribed
// rank that is descheduled does not take longer) and its gradient allreduce: the ranks arrive at a
// vote together, so its time is the vote's, not a wait for a slower rank.
struct BusyLockstepBackend {
  std::int64_t step = 0;
  void run() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    while (std::chrono::steady_clock::now() < until) {
    }
    double gradient = 1.0, sum = 0.0;
    MPI_Allreduce(&gradient, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

// The MPI engine made slow: every blocking vote first sleeps 2 ms (as a Gloo allreduce of a few
// integers can take on a busy machine), and the time spent in votes is counted.
struct SlowCollective : runhooks::MpiCollective {
  SlowCollective() : MpiCollective(MPI_COMM_WORLD) {}
  void allreduce_max(std::span<std::int64_t> values) {
    const auto start = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    MpiCollective::allreduce_max(values);
    voting += std::chrono::steady_clock::now() - start;
  }
  static inline std::chrono::duration<double> voting{};
};

double cast_time = 0.0;  // MPI_Wtime() when StopOneRank last requested its stop

// Requests a stop on one rank after one step, as a NaN check or early stopping would.
struct StopOneRank {
  int rank;
  std::int64_t at;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (world_rank() == rank && run_context.session().step == at) {
      cast_time = MPI_Wtime();
      run_context.request_stop();
    }
  }
};

// Stops the coordinator on one rank after one step (a thread or a hook holding it would).
struct StopCoordinatorOnOneRank {
  int rank;
  std::int64_t at;
  runhooks::Coordinator* coord = nullptr;
  template <class B>
  void after_create_session(B&, runhooks::Coordinator& c) {
    coord = &c;
  }
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (world_rank() == rank && run_context.session().step == at) coord->request_stop();
  }
};

// Raises a real signal in its own process after one step.
struct RaiseOnOneRank {
  int rank;
  std::int64_t at;
  int signal;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (world_rank() == rank && run_context.session().step == at) std::raise(signal);
  }
};

// Counts its calls: wrapped in MpiChiefOnly, only rank 0's count grows.
struct Count {
  int* begins;
  int* after_runs;
  void begin() { ++*begins; }
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    ++*after_runs;
  }
};

struct Outcome {
  std::int64_t steps;
  std::int64_t rounds;
  bool agreed;
  std::int64_t interval;
};

template <class Backend, class... Hooks>
Outcome run(const runhooks::MpiStopVoteOptions& options, Hooks... hooks) {
  runhooks::MonitoredSession session(Backend{}, std::move(hooks)...,
                                     runhooks::MpiStopVoteHook(options));
  runhooks::run_loop(session);
  const auto& vote = session.template hook<runhooks::MpiStopVoteHook>();
  return {session.raw_session().step, vote.rounds(), vote.agreed(), vote.interval()};
}

bool same_on_all_ranks(std::int64_t value) {
  std::int64_t send[2] = {value, -value}, receive[2];
  MPI_Allreduce(send, receive, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return receive[0] == -receive[1];
}

bool all_true(bool value) {
  int mine = value ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

struct Rhythm {
  const char* name;
  runhooks::MpiStopVoteOptions options;
  // The step at which all ranks stop when one rank casts its vote after step s.
  std::int64_t (*expected)(std::int64_t s);
};

std::int64_t round_up(std::int64_t s, std::int64_t k) { return (s + k - 1) / k * k; }

void report(const char* what, const Outcome& outcome) {
  if (world_rank() == 0)
    std::printf("  %-58s stopped at step %lld after %lld rounds\n", what,
                static_cast<long long>(outcome.steps), static_cast<long long>(outcome.rounds));
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const int size = env.size();
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});

  const std::vector<Rhythm> rhythms = {
      {"every step", {.every_n_steps = 1}, [](std::int64_t s) { return s; }},
      {"every step, pipelined", {.every_n_steps = 1, .pipelined = true},
       [](std::int64_t s) { return s + 1; }},
      {"every 7 steps", {.every_n_steps = 7}, [](std::int64_t s) { return round_up(s, 7); }},
      {"every 7 steps, pipelined", {.every_n_steps = 7, .pipelined = true},
       [](std::int64_t s) { return round_up(s, 7) + 7; }},
      {"by time (1 ms)", {.every_n_steps = 0, .every_n_secs = 0.001}, nullptr},
  };

  for (const Rhythm& rhythm : rhythms) {
    if (world_rank() == 0) std::printf("%s\n", rhythm.name);
    // A vote cast on each rank in turn, through MpiVoted, at steps that are and are not vote
    // steps; the backend is in lockstep.
    for (int caster = 0; caster < size; ++caster) {
      const std::int64_t at = 30 + 11 * caster;
      const Outcome outcome = run<LockstepBackend>(
          rhythm.options, runhooks::MpiVoted(StopOneRank{caster, at}));
      MPI_CHECK(same_on_all_ranks(outcome.steps));
      MPI_CHECK(same_on_all_ranks(outcome.rounds));
      MPI_CHECK(all_true(outcome.agreed));
      if (rhythm.expected) {
        MPI_CHECK(outcome.steps == rhythm.expected(at));
      } else {  // by time: within a few intervals of 1 ms (a loaded machine may stall a step)
        const double latency = MPI_Wtime() - cast_time;
        MPI_CHECK(outcome.steps >= at);
        MPI_CHECK(latency < 1.0);
        if (world_rank() == caster)
          std::printf("  (rank %d: stop agreed %.2f ms after the vote was cast)\n", caster,
                      latency * 1e3);
      }
      report(("MpiVoted stop on rank " + std::to_string(caster) + " after step " +
              std::to_string(at))
                 .c_str(),
             outcome);
    }
    {  // Every rank requests a stop directly at the same step: they stop there.
      const Outcome outcome =
          run<LockstepBackend>(rhythm.options, runhooks::StopAtStepHook({.last_step = 53}));
      MPI_CHECK(outcome.steps == 53);
      MPI_CHECK(same_on_all_ranks(outcome.rounds));
      report("StopAtStepHook(last_step 53) on every rank", outcome);
    }
    {  // Asynchronous workers: one rank stops directly (unwrapped) and leaves at once; the
       // others stop at their next vote and nobody is left in a collective.
      const Outcome outcome = run<AsyncBackend>(rhythm.options, StopOneRank{1, 40});
      MPI_CHECK(same_on_all_ranks(outcome.rounds));
      if (world_rank() == 1) MPI_CHECK(outcome.steps == 40);
      MPI_CHECK(outcome.steps >= 40);
      report("async: direct stop on rank 1 after step 40", outcome);
    }
    {  // The same with the coordinator stopped on rank 2.
      const Outcome outcome = run<AsyncBackend>(rhythm.options, StopCoordinatorOnOneRank{2, 25});
      MPI_CHECK(same_on_all_ranks(outcome.rounds));
      if (world_rank() == 2) MPI_CHECK(outcome.steps == 25);
      MPI_CHECK(outcome.steps >= 25);
      report("async: coordinator stopped on rank 2 after step 25", outcome);
    }
  }

  {  // A direct stop on one rank, with a vote after every step: every rank stops there, lockstep.
    const Outcome outcome =
        run<LockstepBackend>({.every_n_steps = 1}, StopOneRank{size - 1, 77});
    MPI_CHECK(outcome.steps == 77);
    MPI_CHECK(same_on_all_ranks(outcome.rounds));
    MPI_CHECK(all_true(outcome.agreed));
  }

  {  // A real signal on rank 1, caught by SignalStopHook wrapped in MpiVoted: every rank
     // stops together at the next vote.
    const Outcome outcome = run<LockstepBackend>(
        {.every_n_steps = 5}, RaiseOnOneRank{1, 21, SIGUSR1},
        runhooks::MpiVoted(runhooks::SignalStopHook({.signals = {SIGUSR1}})));
    MPI_CHECK(outcome.steps == 25);
    MPI_CHECK(same_on_all_ranks(outcome.rounds));
    MPI_CHECK(all_true(outcome.agreed));
    // SignalStopHook's end() put the default action of SIGUSR1 back.
    struct sigaction now {};
    sigaction(SIGUSR1, nullptr, &now);
    MPI_CHECK(now.sa_handler == SIG_DFL);
  }

  {  // MpiChiefOnly: the wrapped hook runs on rank 0 only; its fetch is off elsewhere.
    int begins = 0, after_runs = 0;
    runhooks::MonitoredSession session(
        LockstepBackend{}, runhooks::MpiChiefOnly(Count{&begins, &after_runs}),
        runhooks::StopAtStepHook({.last_step = 10}),
        runhooks::MpiStopVoteHook({.every_n_steps = 4}));
    runhooks::run_loop(session);
    MPI_CHECK(begins == (world_rank() == 0 ? 1 : 0));
    MPI_CHECK(after_runs == (world_rank() == 0 ? 10 : 0));
  }

  {  // Ranks that disagree on the rhythm: every rank throws MpiError from begin(), no hang.
    std::string message;
    try {
      runhooks::MonitoredSession session(
          LockstepBackend{},
          runhooks::MpiStopVoteHook({.every_n_steps = world_rank() == 0 ? 1 : 2}));
    } catch (const runhooks::MpiError& e) {
      message = e.what();
    }
    MPI_CHECK(message.find("differ between ranks") != std::string::npos);
  }

  {  // max_overhead: votes of 2 ms under every_n_secs = 1 ms would take two thirds of the time
     // (a vote after each 1 ms of steps); the default max_overhead of 1 % spaces them to at least
     // 200 ms of steps. 20,000 steps of 20 µs: the rounds while the interval grows (at most 8x a
     // round) and a few more, 1.4 to 1.7 % of the run (65 % without max_overhead).
    SlowCollective::voting = {};
    runhooks::MonitoredSession session(
        BusyLockstepBackend{}, runhooks::StopAtStepHook({.last_step = 20000}),
        runhooks::StopVoteHook(SlowCollective{}, {.every_n_steps = 0, .every_n_secs = 0.001}));
    const auto start = std::chrono::steady_clock::now();
    runhooks::run_loop(session);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    const auto& vote = session.hook<runhooks::StopVoteHook<SlowCollective>>();
    MPI_CHECK(session.raw_session().step == 20000);
    MPI_CHECK(same_on_all_ranks(vote.rounds()));
    MPI_CHECK(SlowCollective::voting.count() < 0.04 * elapsed.count());
    if (world_rank() == 0)
      std::printf("max_overhead 0.01, votes of 2 ms: %lld rounds, %.1f ms of %.0f ms voting "
                  "(%.2f %%), last interval %lld steps\n",
                  static_cast<long long>(vote.rounds()), SlowCollective::voting.count() * 1e3,
                  elapsed.count() * 1e3, 100.0 * SlowCollective::voting.count() / elapsed.count(),
                  static_cast<long long>(vote.interval()));
  }

  {  // TimeLimitHook: the chief's clock decides. Rank 0's clock runs 1 s per step, the others'
     // 100 s, with budgets already spent: only the chief's counts, and every rank stops at the
     // first vote step (every 7) after its 30 s, step 35.
    runhooks::ManualClock clock;
    ManualTimeLimit timer({.max_secs = 30.0, .resolution_secs = 1e-9}, clock);
    if (world_rank() != 0) timer.restore({1000.0});
    const Outcome outcome = run<LockstepBackend>(
        {.every_n_steps = 7}, Tick{clock, world_rank() == 0 ? 1.0 : 100.0},
        runhooks::MpiChiefOnly(runhooks::MpiVoted(std::ref(timer))));
    MPI_CHECK(outcome.steps == 35);
    MPI_CHECK(same_on_all_ranks(outcome.rounds));
    MPI_CHECK(all_true(outcome.agreed));
    MPI_CHECK(timer.stopped() == (world_rank() == 0));
    report("TimeLimitHook: the chief's 30 s, votes every 7 steps", outcome);
  }
  {  // The chief's restored budget is spent at creation: its vote, not a stop of the chief alone
     // before its first step (the others would wait for it in their first step's allreduce);
     // every rank stops after the first vote step.
    runhooks::ManualClock clock;
    ManualTimeLimit timer({.max_secs = 30.0}, clock);
    if (world_rank() == 0) timer.restore({40.0});
    const Outcome outcome = run<LockstepBackend>(
        {.every_n_steps = 3}, runhooks::MpiChiefOnly(runhooks::MpiVoted(std::ref(timer))));
    MPI_CHECK(outcome.steps == 3);
    MPI_CHECK(same_on_all_ranks(outcome.rounds));
    MPI_CHECK(all_true(outcome.agreed));
    report("TimeLimitHook: the chief's budget spent at creation", outcome);
  }
  for (const std::int64_t every : {std::int64_t{1}, std::int64_t{5}}) {
    // SpikeHook: the loss spikes on the last rank alone, at step 17; every rank stops at the
    // vote step that follows (17 with a vote after every step, 20 every 5).
    spike_rank = size - 1;
    spike_step = 17;
    runhooks::SpikeHook<Loss> spike({.on_spike = runhooks::SpikeAction::stop});
    const Outcome outcome = run<SpikyLockstepBackend>(
        {.every_n_steps = every}, runhooks::MpiVoted(std::ref(spike)));
    MPI_CHECK(outcome.steps == round_up(17, every));
    MPI_CHECK(same_on_all_ranks(outcome.rounds));
    MPI_CHECK(all_true(outcome.agreed));
    MPI_CHECK(spike.bad_steps().size() == (world_rank() == size - 1 ? 2u : 0u));
    report(("SpikeHook: a spike on the last rank at step 17, votes every " +
            std::to_string(every))
               .c_str(),
           outcome);
  }
  {  // A rollback would be one rank's: MpiVoted refuses it when made.
    std::string message;
    try {
      runhooks::MpiVoted voted(runhooks::SpikeHook<Loss>({.on_spike = runhooks::SpikeAction::rollback}));
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    MPI_CHECK(message.find("SpikeOptions::on_spike = rollback would roll back one rank alone") !=
              std::string::npos);
  }

  {  // Bad options name the option and the value.
    const auto error_of = [](runhooks::MpiStopVoteOptions options) {
      try {
        options.validate();
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    MPI_CHECK(error_of({.every_n_steps = -1}).find("every_n_steps must be at least 0") !=
              std::string::npos);
    MPI_CHECK(error_of({.every_n_steps = -1}).find("got -1.") != std::string::npos);
    MPI_CHECK(error_of({.every_n_steps = 0, .every_n_secs = 0.0}).find("every_n_secs") !=
              std::string::npos);
    MPI_CHECK(error_of({.every_n_steps = 3, .every_n_secs = -1.0}).empty());  // not used
    MPI_CHECK(error_of({.every_n_steps = 0, .max_overhead = 0.0})
                  .find("MpiStopVoteOptions::max_overhead must be greater than 0 and at most 1, "
                        "got 0.") != std::string::npos);
    MPI_CHECK(error_of({.every_n_steps = 0, .max_overhead = 1.5}).find("got 1.5.") !=
              std::string::npos);
    MPI_CHECK(error_of({.every_n_steps = 0, .max_overhead = std::nan("")}).find("max_overhead") !=
              std::string::npos);
    MPI_CHECK(error_of({.every_n_steps = 3, .max_overhead = 0.0}).empty());  // not used
  }

  return mpi_check_result("mpi_stop_vote");
}
