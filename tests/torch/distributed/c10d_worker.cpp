// A worker of a torchrun job (c10d_faults.py starts it with `python3 -m torch.distributed.run
// --standalone --nproc-per-node N --no-python c10d_worker CASE ...`, or alone for the cases that
// need no job): runhooks' generic rules on the c10d engine, with real processes.
//
//   vote         StopVoteHook on C10dCollective, every rhythm: a vote cast on any one rank
//                (Voted) stops every rank after the expected step with the same rounds, in
//                lockstep (a Gloo allreduce in every step, so a rank left behind would hang);
//                StopAtStepHook on every rank; a direct stop on one asynchronous worker;
//                ChiefOnly; options that differ between ranks.
//   state        ChiefStateHook: every rank holds the chief's state (a step, a weight, 3 MB of
//                bytes) in its after_create_session, and StopAtStepHook's num_steps counts from it.
//   slow-chief   the chief is 3 s late with C10dOptions::timeout_secs = 1: the workers still get
//                its state (their wait is ChiefStateOptions::max_wait_secs, not Gloo's timeout).
//   late-chief   the chief is 30 s late and the workers wait at most 1 s: they fail naming it.
//   throw        --throw-rank throws in its step at --throw-at-step, in lockstep.
//   throw-caught the same, but the program catches the exception and returns normally.
//   hang         --throw-rank stops stepping (alive) at --throw-at-step; the others wait in the
//                vote after every step and fail after C10dOptions::timeout_secs.
//   restart      attempt 0 (TORCHELASTIC_RESTART_COUNT) connects, counts its ranks in the store,
//                votes, and rank 1 fails; under --max-restarts 1 attempt 1 runs on the same
//                agent's store, where its count starts afresh (the attempt's own keys), and ends
//                cleanly.
//   global-step  C10dGlobalStep: the start value, atomic increments (each value handed out once
//                across ranks, gathered through the store), a store() racing with increments
//                (linearizable: the values after it count on from it), one store request per
//                step of a session, waits that end at their deadline or stop, bad options.
//   global-step-waiter
//                GlobalStepWaiterHook on C10dGlobalStep: staggered start (rank k waits for step
//                100 k, which the chief's and the others' steps reach), wake latency, a stopped
//                coordinator and a timeout end the wait.
//   global-step-store-gone
//                run as 2 processes without torchrun, rank 0 serving the store: rank 0 ends
//                while rank 1 waits for the step; rank 1's read fails naming it.
//   connect      the environment only (the error cases: variables, a store that never comes).
//   options      options that name themselves in their errors (run alone).
// Every case but `options` runs under c10d_run_or_abort, so an error is printed with its rank.
// Each rank prints "rank R stopped at step S" where a case ends a session, and rank 0 prints
// "c10d_worker CASE: OK" (or FAILED, exit 1) when every rank's checks passed.

#include <runhooks/torch/distributed/c10d_collective.hpp>
#include <runhooks/torch/distributed/c10d_environment.hpp>
#include <runhooks/torch/distributed/c10d_global_step.hpp>
#include <runhooks/torch/distributed/torchrun_environment.hpp>

#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/distributed/chief_only.hpp>
#include <runhooks/distributed/chief_state_hook.hpp>
#include <runhooks/distributed/stop_vote_hook.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>

#include <ATen/ops/ones.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Collective = runhooks::C10dCollective;
using Group = c10::intrusive_ptr<c10d::ProcessGroupGloo>;

int failures = 0;
int my_rank = -1;

#define C10D_CHECK(condition)                                                                \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      std::fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", my_rank, __FILE__, __LINE__, \
                   #condition);                                                              \
      ++failures;                                                                            \
    }                                                                                        \
  } while (false)

bool same_on_all_ranks(Collective& c, std::int64_t value) {
  std::int64_t both[2] = {value, -value};
  c.allreduce_max(both);
  return both[0] == -both[1];
}

bool all_true(Collective& c, bool value) {
  std::int64_t failed[1] = {value ? 0 : 1};
  c.allreduce_max(failed);
  return failed[0] == 0;
}

// Every rank's verdict, printed once by rank 0; the exit status.
int verdict(Collective& c, const std::string& name) {
  const bool ok = all_true(c, failures == 0);
  if (c.rank() == 0) std::printf("c10d_worker %s: %s\n", name.c_str(), ok ? "OK" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// Data-parallel: a Gloo allreduce in every step, so the ranks step in lockstep.
struct LockstepBackend {
  Group group;
  int throw_rank = -1;
  std::int64_t throw_at = -1;
  std::int64_t step = 0;
  void run() {
    if (group->getRank() == throw_rank && step + 1 == throw_at)
      throw std::runtime_error("injected failure at step " + std::to_string(throw_at));
    std::vector<at::Tensor> gradient{at::ones({1})};
    group->allreduce(gradient)->wait();
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

// Asynchronous workers: no collective in the step. One rank may stop stepping (alive) at a step.
struct AsyncBackend {
  int hang_rank = -1;
  std::int64_t hang_at = -1;
  int rank = 0;
  std::int64_t step = 0;
  void run() {
    if (rank == hang_rank && step + 1 == hang_at)
      std::this_thread::sleep_for(std::chrono::seconds(600));
    volatile double sink = 0.0;
    for (int i = 0; i < 200; ++i) sink = sink + 1.0;
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

std::chrono::steady_clock::time_point cast_time;

// Requests a stop on one rank after one step, as a NaN check or early stopping would.
struct StopOneRank {
  int rank;
  std::int64_t at;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (my_rank == rank && run_context.session().step == at) {
      cast_time = std::chrono::steady_clock::now();
      run_context.request_stop();
    }
  }
};

// Counts its calls: wrapped in ChiefOnly, only rank 0's count grows.
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
};

template <class Backend, class... Hooks>
Outcome run(Backend backend, Collective collective, const runhooks::StopVoteOptions& options,
            Hooks... hooks) {
  runhooks::MonitoredSession session(std::move(backend), std::move(hooks)...,
                                     runhooks::StopVoteHook(std::move(collective), options));
  runhooks::run_loop(session);
  const auto& vote = session.template hook<runhooks::StopVoteHook<Collective>>();
  return {session.raw_session().step, vote.rounds(), vote.agreed()};
}

std::int64_t round_up(std::int64_t s, std::int64_t k) { return (s + k - 1) / k * k; }

int case_vote(runhooks::C10dEnvironment& env) {
  Collective c = env.collective();
  const int size = env.size();
  struct Rhythm {
    const char* name;
    runhooks::StopVoteOptions options;
    std::int64_t (*expected)(std::int64_t s);
  };
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
    for (int caster = 0; caster < size; ++caster) {
      const std::int64_t at = 30 + 11 * caster;
      const Outcome outcome = run(LockstepBackend{env.process_group()}, c, rhythm.options,
                                  runhooks::Voted(StopOneRank{caster, at}));
      C10D_CHECK(same_on_all_ranks(c, outcome.steps));
      C10D_CHECK(same_on_all_ranks(c, outcome.rounds));
      C10D_CHECK(all_true(c, outcome.agreed));
      if (rhythm.expected) {
        C10D_CHECK(outcome.steps == rhythm.expected(at));
      } else {
        C10D_CHECK(outcome.steps >= at);
        if (my_rank == caster)
          C10D_CHECK(std::chrono::steady_clock::now() - cast_time < std::chrono::seconds(2));
      }
      if (my_rank == 0)
        std::printf("%s: a vote on rank %d after step %lld stopped every rank at step %lld after "
                    "%lld rounds\n",
                    rhythm.name, caster, static_cast<long long>(at),
                    static_cast<long long>(outcome.steps), static_cast<long long>(outcome.rounds));
    }
    {  // Every rank requests a stop directly at the same step: they stop there.
      const Outcome outcome = run(LockstepBackend{env.process_group()}, c, rhythm.options,
                                  runhooks::StopAtStepHook({.last_step = 53}));
      C10D_CHECK(outcome.steps == 53);
      C10D_CHECK(same_on_all_ranks(c, outcome.rounds));
    }
    {  // Asynchronous workers: rank 1 stops directly (unwrapped) and leaves at once; the others
       // stop at their next vote and nobody is left in a collective.
      const Outcome outcome = run(AsyncBackend{.rank = my_rank}, c, rhythm.options,
                                  StopOneRank{1, 40});
      C10D_CHECK(same_on_all_ranks(c, outcome.rounds));
      if (my_rank == 1) C10D_CHECK(outcome.steps == 40);
      C10D_CHECK(outcome.steps >= 40);
    }
  }
  {  // ChiefOnly: the wrapped hook runs on rank 0 only.
    int begins = 0, after_runs = 0;
    runhooks::MonitoredSession session(
        LockstepBackend{env.process_group()}, runhooks::ChiefOnly(Count{&begins, &after_runs}, c),
        runhooks::StopAtStepHook({.last_step = 10}),
        runhooks::StopVoteHook(c, {.every_n_steps = 4}));
    runhooks::run_loop(session);
    C10D_CHECK(begins == (my_rank == 0 ? 1 : 0));
    C10D_CHECK(after_runs == (my_rank == 0 ? 10 : 0));
  }
  {  // Ranks that disagree on the rhythm: every rank throws C10dError from begin(), no hang.
    std::string message;
    try {
      runhooks::MonitoredSession session(
          LockstepBackend{env.process_group()},
          runhooks::StopVoteHook(c, {.every_n_steps = my_rank == 0 ? 1 : 2}));
    } catch (const runhooks::C10dError& e) {
      message = e.what();
    }
    C10D_CHECK(message.find("rank " + std::to_string(my_rank) + " of " + std::to_string(size) +
                            ": StopVoteHook's options (every_n_steps, every_n_secs, pipelined, "
                            "max_overhead) differ between ranks") != std::string::npos);
  }
  return verdict(c, "vote");
}

// A backend whose state is a step, a weight and a blob of bytes, all saved and restored.
struct StateBackend {
  std::int64_t step = 0;
  double weight = 0.0;
  std::string blob;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  void save(const std::filesystem::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", step);
    out.add("weight", weight);
    out.close();
    std::ofstream(prefix.string() + ".blob", std::ios::binary) << blob;
  }
  void restore(const std::filesystem::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    step = in.scalar<std::int64_t>("global_step");
    weight = in.scalar<double>("weight");
    std::ifstream file(prefix.string() + ".blob", std::ios::binary);
    blob.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
};

// Each rank's own initial state: the chief's is the one every rank must end up with.
StateBackend initial_state(int rank) {
  std::mt19937_64 random(static_cast<std::uint64_t>(rank) + 1);
  std::string blob(3 << 20, '\0');
  for (char& c : blob) c = static_cast<char>(random());
  return {.step = rank == 0 ? 42 : 0, .weight = 100.0 + rank, .blob = std::move(blob)};
}

struct Seen {
  std::int64_t first_step = -1;  // the step at the first after_create_session after the state
  double weight = 0.0;
  std::size_t blob_hash = 0;
};

struct Observe {
  Seen* seen;
  void after_create_session(StateBackend& backend) {
    seen->first_step = backend.step;
    seen->weight = backend.weight;
    seen->blob_hash = std::hash<std::string>{}(backend.blob);
  }
};

int case_state(runhooks::C10dEnvironment& env, const std::string& name, double chief_delay_secs,
               double max_wait_secs) {
  Collective c = env.collective();
  Seen seen;
  std::int64_t last = -1;
  {
    // The chief is slow to create its backend (a long restore): the others wait for it in
    // ChiefStateHook, after every rank's begin() (the vote's first allreduce) has met.
    const auto create = [&] {
      if (env.is_chief() && chief_delay_secs > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(chief_delay_secs));
      return initial_state(env.rank());
    };
    runhooks::MonitoredSession session(
        create, runhooks::ChiefStateHook(c, {.max_wait_secs = max_wait_secs}),
        Observe{&seen}, runhooks::StopAtStepHook({.num_steps = 5}),
        runhooks::StopVoteHook(c, {.every_n_steps = 1}));
    runhooks::run_loop(session);
    last = session.raw_session().step;
  }
  const std::size_t chief_hash = std::hash<std::string>{}(initial_state(0).blob);
  C10D_CHECK(seen.first_step == 42);
  C10D_CHECK(seen.weight == 100.0);
  C10D_CHECK(seen.blob_hash == chief_hash);
  C10D_CHECK(last == 47);
  std::printf("rank %d stopped at step %lld\n", env.rank(), static_cast<long long>(last));
  std::fflush(stdout);
  return verdict(c, name);
}

int case_faults(runhooks::C10dEnvironment& env, const std::string& name, int throw_rank,
                std::int64_t throw_at) {
  Collective c = env.collective();
  Outcome outcome{};
  if (name == "throw-caught") {  // the program catches the error and carries on, env alive
    try {
      run(LockstepBackend{env.process_group(), throw_rank, throw_at}, c, {},
          runhooks::StopAtStepHook({.last_step = 100000}));
    } catch (const std::exception& e) {
      std::printf("rank %d caught: %s\n", env.rank(), e.what());
      std::fflush(stdout);
    }
    return 0;  // ~C10dEnvironment must end the job: the other rank waits in the allreduce
  }
  if (name == "throw") {
    outcome = run(LockstepBackend{env.process_group(), throw_rank, throw_at}, c, {},
                  runhooks::StopAtStepHook({.last_step = 100000}));
  } else {  // hang: the others wait for the hanging rank in the vote after every step
    outcome = run(AsyncBackend{throw_rank, throw_at, env.rank()}, c, {.every_n_steps = 1},
                  runhooks::StopAtStepHook({.last_step = 100000}));
  }
  std::printf("rank %d stopped at step %lld\n", env.rank(), static_cast<long long>(outcome.steps));
  return verdict(c, name);
}

int case_restart(runhooks::C10dEnvironment& env) {
  Collective c = env.collective();
  // Every rank counts itself in this attempt's store: the agent's store outlives attempt 0, and
  // only the attempt's own keys make attempt 1 count from 0 again.
  env.store()->add("ranks", 1);
  c.barrier();
  const std::int64_t counted = env.store()->add("ranks", 0);
  C10D_CHECK(counted == env.size());
  if (counted != env.size())
    std::fprintf(stderr, "rank %d: attempt %lld's store counted %lld ranks\n", env.rank(),
                 static_cast<long long>(env.variables().restart_count),
                 static_cast<long long>(counted));
  const Outcome outcome = run(LockstepBackend{env.process_group()}, c, {.every_n_steps = 5},
                              runhooks::StopAtStepHook({.last_step = 20}));
  C10D_CHECK(outcome.steps == 20);
  const std::int64_t attempt = env.variables().restart_count;
  std::printf("attempt %lld: rank %d stopped at step %lld\n", static_cast<long long>(attempt),
              env.rank(), static_cast<long long>(outcome.steps));
  std::fflush(stdout);
  if (attempt == 0 && env.rank() == 1) runhooks::c10d_abort_job("failing attempt 0 on purpose");
  return verdict(c, "restart");
}

// ---- C10dGlobalStep -------------------------------------------------------------------------

using Clock = std::chrono::steady_clock;

// Every rank's values, gathered on rank 0 through the store (key prefix `name`); empty elsewhere.
std::vector<std::int64_t> gather_on_chief(runhooks::C10dEnvironment& env, const std::string& name,
                                          const std::vector<std::int64_t>& mine) {
  std::vector<std::uint8_t> bytes(mine.size() * sizeof(std::int64_t));
  if (!bytes.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  env.store()->set(name + "/" + std::to_string(env.rank()), bytes);
  env.collective().barrier();
  std::vector<std::int64_t> all;
  if (env.rank() != 0) return all;
  for (int r = 0; r < env.size(); ++r) {
    const std::vector<std::uint8_t> theirs = env.store()->get(name + "/" + std::to_string(r));
    const std::size_t at = all.size();
    all.resize(at + theirs.size() / sizeof(std::int64_t));
    if (!theirs.empty()) std::memcpy(all.data() + at, theirs.data(), theirs.size());
  }
  return all;
}

struct StepRecord {
  std::optional<std::int64_t> first_seen;  // the global step this rank saw before its first step
  std::int64_t own_steps = 0;
  std::int64_t last_value = 0;
  std::int64_t value_before_last = 0;
};

// An asynchronous worker whose step is an increment of the shared step, as in the MPI tests.
struct SharedStepWorker {
  runhooks::C10dGlobalStep* shared;
  StepRecord* record;
  void run() {
    if (!record->first_seen) record->first_seen = shared->cached();
    record->value_before_last = record->last_value;
    record->last_value = shared->increment();
    ++record->own_steps;
  }
  std::int64_t global_step() const { return shared->cached(); }
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    Clock::time_point deadline) {
    return shared->wait_for_global_step(target, stop, deadline);
  }
};
static_assert(runhooks::WaitableGlobalStep<SharedStepWorker>);

double micros_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

int case_global_step(runhooks::C10dEnvironment& env) {
  Collective c = env.collective();
  const int size = env.size();
  {  // Bad options are refused on every rank before any request or collective.
    std::string message;
    try {
      runhooks::C10dGlobalStep step(env, 0, {.max_poll_interval_secs = -1.0});
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    C10D_CHECK(message.find("C10dGlobalStepOptions::max_poll_interval_secs") != std::string::npos);
    C10D_CHECK(message.find("got -1") != std::string::npos);
  }
  {  // Atomic increments: the values handed out are exactly start+1 ... start+size*n.
    constexpr std::int64_t start = 100, n = 300;
    runhooks::C10dGlobalStep step(env, start);
    C10D_CHECK(step.cached() == start);
    C10D_CHECK(step.load() == start);
    c.barrier();  // every rank has read it before anyone increments
    std::vector<std::int64_t> seen(n);
    const auto t0 = Clock::now();
    for (std::int64_t& value : seen) value = step.increment();
    const double us_per_increment = micros_since(t0) / static_cast<double>(n);
    C10D_CHECK(std::is_sorted(seen.begin(), seen.end()));
    C10D_CHECK(step.cached() == seen.back());
    c.barrier();
    C10D_CHECK(step.load() == start + size * n);
    C10D_CHECK(step.store_operations() == 1 + n + 1);  // load, increments, load
    std::vector<std::int64_t> all = gather_on_chief(env, "test/increments", seen);
    if (env.rank() == 0) {
      std::sort(all.begin(), all.end());
      C10D_CHECK(all.size() == static_cast<std::size_t>(size * n));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < all.size(); ++i)
        if (all[i] != start + 1 + static_cast<std::int64_t>(i)) ++wrong;
      C10D_CHECK(wrong == 0);
      std::printf("increments: %d ranks x %lld from %lld handed out %zu values, %zu out of place; "
                  "%.0f us per increment on rank 0\n",
                  size, static_cast<long long>(n), static_cast<long long>(start), all.size(),
                  wrong, us_per_increment);
    }
  }
  {  // store() racing with increments: rank 0 stores k * 1e6 (k = 1, 2, ...) while the others
     // increment. Linearizable: the increments after each store return exactly band + 1,
     // band + 2, ... (contiguous, from the stored value), and the end value counts on from the
     // last store. An add of a difference would start a band above band + 1.
    constexpr std::int64_t band = 1'000'000, n = 300;
    runhooks::C10dGlobalStep step(env);
    std::vector<std::int64_t> seen;
    std::int64_t stores = 0, requests = 0;
    if (env.rank() == 0) {
      const std::int64_t before = step.store_operations();
      while (env.store()->add("test/store-race/done", 0) < size - 1 && stores < 1000) {
        ++stores;
        step.store(stores * band);
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
      requests = step.store_operations() - before;
    } else {
      // Paced (a real step takes milliseconds): increments back to back from 3 ranks leave a
      // compare-and-set no gap, and rank 0's first store would only land after the last of them.
      seen.resize(n);
      for (std::int64_t& value : seen) {
        value = step.increment();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      env.store()->add("test/store-race/done", 1);
    }
    const std::vector<std::int64_t> all = gather_on_chief(env, "test/store-race", seen);
    const std::int64_t end = step.load();
    if (env.rank() == 0) {
      std::vector<std::vector<std::int64_t>> bands(static_cast<std::size_t>(stores) + 1);
      bool in_range = true;
      for (const std::int64_t v : all) {
        if (v <= 0 || v / band > stores) {
          in_range = false;
          continue;
        }
        bands[static_cast<std::size_t>(v / band)].push_back(v);
      }
      C10D_CHECK(in_range);
      std::int64_t broken_bands = 0;
      for (std::size_t k = 0; k < bands.size(); ++k) {
        std::sort(bands[k].begin(), bands[k].end());
        for (std::size_t i = 0; i < bands[k].size(); ++i)
          if (bands[k][i] !=
              static_cast<std::int64_t>(k) * band + 1 + static_cast<std::int64_t>(i)) {
            ++broken_bands;
            break;
          }
      }
      C10D_CHECK(broken_bands == 0);
      C10D_CHECK(all.size() == static_cast<std::size_t>((size - 1) * n));
      C10D_CHECK(end == stores * band + static_cast<std::int64_t>(bands.back().size()));
      std::printf("store racing with increments: %lld stores by rank 0 in %lld compare-and-set "
                  "requests, %zu increments by the others, %lld bands not counting on from their "
                  "store\n",
                  static_cast<long long>(stores), static_cast<long long>(requests), all.size(),
                  static_cast<long long>(broken_bands));
    }
    c.barrier();
  }
  {  // A session: one store request per step, whatever the hooks read.
    constexpr std::int64_t last_step = 400;
    runhooks::C10dGlobalStep step(env);
    StepRecord record;
    {
      runhooks::MonitoredSession session(SharedStepWorker{&step, &record},
                                         runhooks::StopAtStepHook({.last_step = last_step}),
                                         runhooks::StepCounterHook({.every_n_steps = 50}));
      runhooks::run_loop(session);
    }
    const std::int64_t requests = step.store_operations();
    C10D_CHECK(record.own_steps > 0);
    C10D_CHECK(requests == record.own_steps);
    // Each rank stopped at its first own step whose increment reached the last step.
    C10D_CHECK(record.last_value >= last_step);
    C10D_CHECK(record.own_steps == 1 || record.value_before_last < last_step);
    std::int64_t total[1] = {0};
    for (const std::int64_t s : gather_on_chief(env, "test/session", {record.own_steps}))
      total[0] += s;
    c.allreduce_max(total);  // rank 0's sum to every rank (the others' are 0)
    C10D_CHECK(step.load() == total[0]);
    C10D_CHECK(total[0] >= last_step && total[0] < last_step + size);
    if (env.rank() == 0)
      std::printf("session: %lld steps on rank 0, %lld store requests\n",
                  static_cast<long long>(record.own_steps), static_cast<long long>(requests));
    c.barrier();
  }
  {  // Waits: a deadline that passes, a stop already requested, a target already reached.
    runhooks::C10dGlobalStep step(env);
    const auto t0 = Clock::now();
    const std::int64_t value =
        step.wait_for_global_step(10, {}, t0 + std::chrono::milliseconds(20));
    const auto waited = Clock::now() - t0;
    C10D_CHECK(value == 0);
    C10D_CHECK(waited >= std::chrono::milliseconds(20));
    C10D_CHECK(waited < std::chrono::seconds(5));
    std::stop_source stop;
    stop.request_stop();
    const auto t1 = Clock::now();
    C10D_CHECK(step.wait_for_global_step(10, stop.get_token(), t1 + std::chrono::hours(1)) == 0);
    C10D_CHECK(Clock::now() - t1 < std::chrono::seconds(5));
    C10D_CHECK(step.wait_for_global_step(0, {}, t1 + std::chrono::hours(1)) == 0);
    c.barrier();
  }
  return verdict(c, "global-step");
}

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

int case_global_step_waiter(runhooks::C10dEnvironment& env) {
  Collective c = env.collective();
  const int rank = env.rank(), size = env.size();
  {  // Staggered start: rank k waits for global step 100 k, which rank 0 (no wait) starts
     // reaching alone; all stop at 1000. A waiter gives up after 5 s (DeadlineExceededError,
     // reported with its rank), before the others' barrier times out.
    runhooks::C10dGlobalStep step(env);
    StepRecord record;
    const std::int64_t threshold = 100 * rank;
    {
      runhooks::MonitoredSession session(
          SharedStepWorker{&step, &record},
          runhooks::GlobalStepWaiterHook(threshold, {.timeout_secs = 5.0}),
          runhooks::StopAtStepHook({.last_step = 1000}));
      runhooks::run_loop(session);
    }
    C10D_CHECK(record.first_seen.has_value());
    C10D_CHECK(record.first_seen.value_or(-1) >= threshold);
    C10D_CHECK(step.cached() >= 1000);
    const std::vector<std::int64_t> firsts =
        gather_on_chief(env, "test/staggered", {record.first_seen.value_or(-1), record.own_steps});
    if (rank == 0) {
      std::int64_t total = 0;
      for (int r = 0; r < size; ++r) {
        std::printf("staggered start: rank %d waited for step %d, first saw %lld, stepped %lld "
                    "times\n",
                    r, 100 * r, static_cast<long long>(firsts[2 * static_cast<std::size_t>(r)]),
                    static_cast<long long>(firsts[2 * static_cast<std::size_t>(r) + 1]));
        total += firsts[2 * static_cast<std::size_t>(r) + 1];
      }
      C10D_CHECK(step.load() == total);
    }
    c.barrier();
  }
  {  // Wake latency: rank 0 stores the target at a known instant; the others wait in the hook.
    constexpr int trials = 6;
    constexpr std::int64_t target = 1000;
    std::vector<std::int64_t> latencies_us;
    for (int trial = 0; trial < trials; ++trial) {
      runhooks::C10dGlobalStep step(env);
      std::optional<Clock::time_point> woke;
      std::int64_t reached_ns[1] = {0};
      if (rank == 0) {
        c.barrier();
        // The others are waiting, long enough for their poll to reach its longest interval.
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        reached_ns[0] = Clock::now().time_since_epoch().count();
        step.store(target);
      } else {
        StepRecord record;
        runhooks::MonitoredSession session(
            SharedStepWorker{&step, &record},
            runhooks::GlobalStepWaiterHook(target, {.timeout_secs = 5.0}), WakeTime{&woke},
            runhooks::StopAtStepHook({.last_step = target}));
        c.barrier();
        session.run();  // waits in the waiter's before_run
      }
      c.allreduce_max(reached_ns);  // rank 0's instant to every rank (the others' are 0)
      if (rank != 0) {
        C10D_CHECK(woke.has_value());
        if (woke)
          latencies_us.push_back((woke->time_since_epoch().count() - reached_ns[0]) / 1000);
      }
      c.barrier();
    }
    std::vector<std::int64_t> mine;  // median, max
    if (rank != 0 && !latencies_us.empty()) {
      std::sort(latencies_us.begin(), latencies_us.end());
      C10D_CHECK(latencies_us.front() >= 0);
      mine = {latencies_us[latencies_us.size() / 2], latencies_us.back()};
    }
    const std::vector<std::int64_t> all = gather_on_chief(env, "test/latency", mine);
    if (rank == 0) {
      C10D_CHECK(all.size() == 2 * static_cast<std::size_t>(size - 1));
      std::int64_t worst_median = 0;
      for (std::size_t r = 0; 2 * r + 1 < all.size(); ++r) {
        std::printf("wake latency, rank %zu: median %lld us, max %lld us over %d trials\n", r + 1,
                    static_cast<long long>(all[2 * r]), static_cast<long long>(all[2 * r + 1]),
                    trials);
        worst_median = std::max(worst_median, all[2 * r]);
      }
      // About one poll interval (1 ms) plus a round trip; 10 ms leaves room for a loaded machine
      // while still failing a waiter that polls every 100 ms (or sleeps through intervals of its
      // own), whose wake-up comes tens of ms late after the 200 ms wait.
      C10D_CHECK(worst_median < 10'000);
    }
  }
  {  // A stopped coordinator ends the wait: StopIteration, a clean end of run_loop.
    runhooks::C10dGlobalStep step(env);
    StepRecord record;
    const auto t0 = Clock::now();
    runhooks::MonitoredSession session(SharedStepWorker{&step, &record},
                                       runhooks::GlobalStepWaiterHook(1'000'000),
                                       StopCoordinatorAfter{std::chrono::milliseconds(100)});
    bool ended_cleanly = false;
    try {
      runhooks::run_loop(session);
      ended_cleanly = true;
    } catch (...) {
    }
    const auto waited = Clock::now() - t0;
    C10D_CHECK(ended_cleanly);
    C10D_CHECK(record.own_steps == 0);
    C10D_CHECK(waited >= std::chrono::milliseconds(100));
    C10D_CHECK(waited < std::chrono::seconds(5));
    c.barrier();
  }
  {  // A timeout ends it with DeadlineExceededError.
    runhooks::C10dGlobalStep step(env);
    StepRecord record;
    const auto t0 = Clock::now();
    runhooks::MonitoredSession session(
        SharedStepWorker{&step, &record},
        runhooks::GlobalStepWaiterHook(1'000'000, {.timeout_secs = 0.05}));
    bool deadline = false;
    try {
      session.run();
    } catch (const runhooks::DeadlineExceededError&) {
      deadline = true;
    }
    const auto waited = Clock::now() - t0;
    C10D_CHECK(deadline);
    C10D_CHECK(waited >= std::chrono::milliseconds(50));
    C10D_CHECK(waited < std::chrono::seconds(5));
    c.barrier();
  }
  return verdict(c, "global-step-waiter");
}

// Rank 0 serves the store (TORCHELASTIC_USE_AGENT_STORE=False) and ends once rank 1 waits for
// the step; rank 1's next read fails: a C10dError that names it, reported by c10d_run_or_abort.
int case_global_step_store_gone(runhooks::C10dEnvironment& env) {
  runhooks::C10dGlobalStep step(env);
  if (env.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::printf("rank 0 ends, with the store it serves\n");
    std::fflush(stdout);
    std::_Exit(0);
  }
  const auto t0 = Clock::now();
  step.wait_for_global_step(1'000'000, {}, t0 + std::chrono::seconds(30));
  std::printf("rank %d: the wait ended without an error after %.1f s\n", env.rank(),
              micros_since(t0) * 1e-6);
  return 1;
}

int case_options() {
  const auto error_of = [](auto&& validate) {
    try {
      validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string timeout =
      error_of([] { runhooks::C10dOptions{.timeout_secs = 0.0}.validate(); });
  C10D_CHECK(timeout.find("C10dOptions::timeout_secs must be a number of seconds greater than 0") !=
             std::string::npos);
  C10D_CHECK(timeout.find("got 0.") != std::string::npos);
  C10D_CHECK(error_of([] { runhooks::StopVoteOptions{.every_n_steps = -1}.validate(); })
                 .find("StopVoteOptions::every_n_steps must be at least 0") != std::string::npos);
  C10D_CHECK(error_of([] { runhooks::ChiefStateOptions{.max_wait_secs = -1.0}.validate(); })
                 .find("ChiefStateOptions::max_wait_secs must be a number of seconds at least 0") !=
             std::string::npos);
  for (const double bad : {0.0, -1.0, std::nan(""), 2e9}) {
    const std::string poll = error_of(
        [bad] { runhooks::C10dGlobalStepOptions{.max_poll_interval_secs = bad}.validate(); });
    C10D_CHECK(poll.find("C10dGlobalStepOptions::max_poll_interval_secs must be a number of "
                         "seconds greater than 0 and at most 1e+09, got " +
                         runhooks::detail::format_number(bad) + ".") != std::string::npos);
  }
  C10D_CHECK(error_of([] {
               runhooks::C10dGlobalStepOptions{.max_poll_interval_secs = 1e9}.validate();
             }).empty());
  // The store's counter text, parsed strictly (a compare-and-set compares bytes).
  C10D_CHECK(runhooks::detail::parse_store_counter("42") == 42);
  C10D_CHECK(runhooks::detail::parse_store_counter("-7") == -7);
  C10D_CHECK(runhooks::detail::parse_store_counter("9223372036854775807") ==
             std::numeric_limits<std::int64_t>::max());
  for (const char* bad : {"", "+1", " 1", "1 ", "1x", "0x10", "9223372036854775808", "-"})
    C10D_CHECK(!runhooks::detail::parse_store_counter(bad));
  std::printf("c10d_worker options: %s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}

double number_after(int& i, int argc, char** argv) {
  if (i + 1 >= argc) throw std::invalid_argument(std::string(argv[i]) + " needs a value");
  return std::stod(argv[++i]);
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  if (argc < 2) {
    std::fprintf(stderr, "usage: c10d_worker CASE [--timeout-secs S] [--max-wait-secs S] "
                         "[--chief-delay-secs S] [--throw-rank R] [--throw-at-step N]\n");
    return 2;
  }
  const std::string name = argv[1];
  if (name == "options") return case_options();
  return runhooks::c10d_run_or_abort([&] {
    double timeout_secs = 60.0, max_wait_secs = 7200.0, chief_delay_secs = 0.0;
    int throw_rank = -1;
    std::int64_t throw_at = -1;
    for (int i = 2; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--timeout-secs") {
        timeout_secs = number_after(i, argc, argv);
      } else if (arg == "--max-wait-secs") {
        max_wait_secs = number_after(i, argc, argv);
      } else if (arg == "--chief-delay-secs") {
        chief_delay_secs = number_after(i, argc, argv);
      } else if (arg == "--throw-rank") {
        throw_rank = static_cast<int>(number_after(i, argc, argv));
      } else if (arg == "--throw-at-step") {
        throw_at = static_cast<std::int64_t>(number_after(i, argc, argv));
      } else {
        throw std::invalid_argument("unknown argument '" + std::string(arg) + "'");
      }
    }
    runhooks::C10dEnvironment env({.timeout_secs = timeout_secs});
    my_rank = env.rank();
    if (name == "connect") {
      std::printf("rank %d of %d connected\n", env.rank(), env.size());
      return 0;
    }
    if (name == "vote") return case_vote(env);
    if (name == "state" || name == "slow-chief" || name == "late-chief")
      return case_state(env, name, chief_delay_secs, max_wait_secs);
    if (name == "throw" || name == "throw-caught" || name == "hang")
      return case_faults(env, name, throw_rank, throw_at);
    if (name == "restart") return case_restart(env);
    if (name == "global-step") return case_global_step(env);
    if (name == "global-step-waiter") return case_global_step_waiter(env);
    if (name == "global-step-store-gone") return case_global_step_store_gone(env);
    throw std::invalid_argument("unknown case '" + name + "'");
  });
}
