// The C++ side of `./dev bench-peers ddp` (tools/bench_peers/ddp.py, docs/performance.md, "Data
// parallelism"): one rank of a data-parallel job, launched by torchrun (--engine c10d: a Gloo
// process group from C10dEnvironment) or by mpirun (--engine mpi: MpiEnvironment), that runs one
// of three loops and prints what it measured, one line per rank:
//   train      examples/torch/train_digits_ddp's job: the same model, data, shards, backend
//              (TorchBackend + GradientAllreduce over the engine), optimizer and hooks
//              (ChiefStateHook, StopAtStepHook, the chief's StepCounterHook, LoggingTensorHook,
//              SummarySaverHook and CheckpointSaverHook, Voted(SignalStopHook), StopVoteHook at
//              its default rhythm), run through run_loop. --warmup steps untimed, then --steps
//              steps timed with the steady clock, as tools/bench_peers/ddp_torch.py times
//              PyTorch's DistributedDataParallel. The chief's checkpoints, logs and summaries
//              happen at steps --save-steps and --log-every (the driver puts them past the last
//              step, so that the timed steps are the step and the hooks' per-step cost; the
//              final checkpoint is written after the clock stops). --vote never: the same job
//              with no vote in the timed steps (the vote's cost in the job is the difference);
//              --vote pipelined: StopVoteOptions::pipelined. Prints
//                rank R train steps N secs S allreduce_secs A allreduce_calls C
//              with A the seconds GradientAllreduce spent in the timed steps (copies in and out,
//              the allreduce, the division), over C calls.
//   allreduce  the gradients' allreduce alone: the same bytes (the MLP's 4810 float32, 19 KB, one
//              bucket) summed over the ranks by the engine's plain call, ProcessGroupGloo's
//              allreduce()->wait() or MPI_Allreduce, --warmup times untimed then --steps timed.
//              Prints `rank R allreduce steps N secs S`.
//   hooks      the hooks' own cost on an empty step (a backend whose step only counts, as
//              bench/torch_loop.cpp's NullBackend): train_digits_ddp's hooks, with their file
//              outputs set past the window so that what is left is their per-step cost, against
//              a hand-written loop (`hand-written`): with the vote never in the window (`hooks`:
//              the per-step cost of every hook, the vote's check included) and with a vote after
//              every step (`vote-every-step`: the difference is the price of one vote, which the
//              default rhythm pays about every 10 ms; `pipelined-every-step`: the same with
//              StopVoteOptions::pipelined, one nonblocking vote in flight). Every variant runs --rounds times, the
//              order rotating; each window is --steps steps (a hundredth of them with a vote per
//              step, at least 100) after a barrier. Prints, per window,
//              `rank R hooks VARIANT steps N secs S votes V`.
//
//   torchrun --standalone --nproc-per-node 2 --no-python bench_peers_ddp --engine c10d
//       --loop train --data digits.csv.gz --dir SCRATCH [--warmup N] [--steps N]
//   mpirun -np 2 bench_peers_ddp --engine mpi --loop allreduce [--warmup N] [--steps N]
//
// Built by ./dev bench-peers (build_by_default false): not a benchmark() item, it needs a
// launcher.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/distributed/chief_only.hpp>
#include <runhooks/distributed/chief_state_hook.hpp>
#include <runhooks/distributed/stop_vote_hook.hpp>
#include <runhooks/hooks/logging_tensor_hook.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/session/run_loop.hpp>
#include <runhooks/session_creator.hpp>
#include <runhooks/torch/distributed/c10d_environment.hpp>
#include <runhooks/torch/distributed/c10d_gradient_allreduce.hpp>
#include <runhooks/torch/distributed/gradient_allreduce.hpp>
#include <runhooks/torch/tensor_batches.hpp>
#include <runhooks/torch/torch_backend.hpp>
#if RUNHOOKS_BENCH_MPI
#include <runhooks/mpi/mpi_collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/torch/distributed/mpi_gradient_allreduce.hpp>
#endif

#include "../../examples/torch/digits.hpp"

#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max() / 4;

struct Options {
  std::string engine, loop, data, dir;
  std::int64_t warmup = 200, steps = 2000, rounds = 5;
  std::int64_t save_steps = never, log_every = never;
  std::string vote = "default";  // train: default, pipelined or never (no vote in the window)
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr,
               "bench_peers_ddp: %s\nusage: bench_peers_ddp --engine c10d|mpi --loop "
               "train|allreduce|hooks [--data digits.csv.gz] [--dir DIR] [--warmup N] [--steps N] "
               "[--rounds N] [--save-steps N] [--log-every N] [--vote default|pipelined|never]\n",
               message.c_str());
  std::exit(2);
}

std::int64_t count(std::string_view option, std::string_view text, std::int64_t min) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < min || value > never)
    usage_error(std::string(option) + " must be an integer of at least " + std::to_string(min) +
                ", got '" + std::string(text) + "'");
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (arg == "--engine") o.engine = value;
    else if (arg == "--loop") o.loop = value;
    else if (arg == "--data") o.data = value;
    else if (arg == "--dir") o.dir = value;
    else if (arg == "--warmup") o.warmup = count(arg, value, 1);
    else if (arg == "--steps") o.steps = count(arg, value, 1);
    else if (arg == "--rounds") o.rounds = count(arg, value, 1);
    else if (arg == "--save-steps") o.save_steps = count(arg, value, 1);
    else if (arg == "--log-every") o.log_every = count(arg, value, 1);
    else if (arg == "--vote") o.vote = value;
    else usage_error("unknown argument '" + std::string(arg) + "'");
  }
  if (o.engine != "c10d" && o.engine != "mpi") usage_error("--engine must be c10d or mpi");
  if (o.loop != "train" && o.loop != "allreduce" && o.loop != "hooks")
    usage_error("--loop must be train, allreduce or hooks");
  if (o.vote != "default" && o.vote != "pipelined" && o.vote != "never")
    usage_error("--vote must be default, pipelined or never");
  if (o.loop != "allreduce" && o.dir.empty()) usage_error("--loop " + o.loop + " needs --dir");
  if (o.loop == "train" && o.data.empty()) usage_error("--loop train needs --data");
  return o;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);  // one write per line: the ranks share stdout
  std::fflush(stdout);
}

double secs_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What the loops need from an engine: train_digits_ddp's pieces, a plain allreduce of a float
// tensor, a barrier.
struct C10dEngine {
  using Sum = runhooks::C10dAllreduceSum;
  runhooks::C10dEnvironment env{runhooks::C10dOptions{}};
  int rank() const { return env.rank(); }
  int size() const { return env.size(); }
  auto collective() const { return env.collective(); }
  Sum gradient_sum() const { return Sum(env.process_group()); }
  void allreduce(std::vector<at::Tensor>& tensors) const {
    env.process_group()->allreduce(tensors)->wait();
  }
  void barrier() const { env.collective().barrier(); }
};

#if RUNHOOKS_BENCH_MPI
struct MpiEngine {
  using Sum = runhooks::MpiAllreduceSum;
  runhooks::MpiEnvironment env;
  MpiEngine(int& argc, char**& argv) : env(argc, argv) {}
  int rank() const { return runhooks::MpiEnvironment::rank(); }
  int size() const { return runhooks::MpiEnvironment::size(); }
  auto collective() const { return runhooks::MpiCollective(MPI_COMM_WORLD); }
  Sum gradient_sum() const { return Sum(MPI_COMM_WORLD); }
  void allreduce(std::vector<at::Tensor>& tensors) const {
    at::Tensor& t = tensors[0];
    MPI_Allreduce(MPI_IN_PLACE, t.mutable_data_ptr(), static_cast<int>(t.numel()), MPI_FLOAT,
                  MPI_SUM, MPI_COMM_WORLD);
  }
  void barrier() const { MPI_Barrier(MPI_COMM_WORLD); }
};
#endif

// ---- train: train_digits_ddp's job, timed after its warm-up ------------------------------------

template <class Engine>
void train(Engine& engine, const Options& o) {
  using Sum = typename Engine::Sum;
  using Backend = runhooks::TorchBackend<digits::Model, torch::optim::SGD, runhooks::CrossEntropyLoss,
                                         runhooks::GradientAllreduce<Sum>>;
  torch::set_num_threads(1);
  const int rank = engine.rank(), size = engine.size();
  const std::uint64_t seed = 1;
  const digits::Split data = digits::split(digits::load_digits(o.data));
  const runhooks::TensorBatches batches =
      digits::train_batches(data, seed, {.rank = rank, .num_replicas = size});
  const auto make_backend = [&] {
    return Backend(digits::make_model(seed), batches,
                   runhooks::GradientAllreduce<Sum>(engine.gradient_sum()),
                   torch::optim::SGDOptions(0.05).momentum(0.9));
  };
  const std::string dir = o.dir + "/rank" + std::to_string(rank);
  const std::int64_t last_step = o.warmup + o.steps;
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator(make_backend, {.checkpoint_dir = ""}, runhooks::NoRecovery{}),
      runhooks::ChiefStateHook(engine.collective()),
      runhooks::StopAtStepHook({.last_step = last_step}),
      runhooks::ChiefOnly(runhooks::StepCounterHook({.every_n_steps = o.log_every},
                                                    runhooks::SummaryOutput(dir)),
                          rank == 0),
      runhooks::ChiefOnly(
          runhooks::LoggingTensorHook(runhooks::keys<runhooks::BatchLoss, runhooks::BatchAccuracy>,
                                      {.every_n_iter = o.log_every}),
          rank == 0),
      runhooks::ChiefOnly(
          runhooks::SummarySaverHook({.save_steps = o.log_every}, dir,
                                     runhooks::scalars<runhooks::BatchLoss, runhooks::BatchAccuracy>),
          rank == 0),
      runhooks::ChiefOnly(
          runhooks::CheckpointSaverHook({.checkpoint_dir = dir, .save_steps = o.save_steps}),
          rank == 0),
      runhooks::Voted(runhooks::SignalStopHook()),
      runhooks::StopVoteHook(engine.collective(),
                             {.every_n_steps = o.vote == "never" ? never : 0,
                              .pipelined = o.vote == "pipelined"}),
  };
  Backend& backend = session.raw_session();
  Clock::time_point start{}, stop{};
  std::int64_t calls0 = 0;
  double secs0 = 0.0;
  runhooks::run_loop(session, [&] {
    session.run();
    const std::int64_t step = backend.global_step();
    if (step == o.warmup) {
      calls0 = backend.gradient_sync().calls();
      secs0 = backend.gradient_sync().seconds();
      start = Clock::now();
    } else if (step == last_step) {
      stop = Clock::now();
    }
  });
  if (backend.global_step() != last_step)
    throw std::runtime_error("stopped at step " + std::to_string(backend.global_step()) +
                             ", not " + std::to_string(last_step));
  char line[240];
  std::snprintf(line, sizeof line, "rank %d train steps %lld secs %.9f allreduce_secs %.9f "
                "allreduce_calls %lld", rank, static_cast<long long>(o.steps),
                std::chrono::duration<double>(stop - start).count(),
                backend.gradient_sync().seconds() - secs0,
                static_cast<long long>(backend.gradient_sync().calls() - calls0));
  say(line);
}

// ---- allreduce: the same bytes alone ----------------------------------------------------------

template <class Engine>
void allreduce(Engine& engine, const Options& o) {
  torch::set_num_threads(1);
  // The MLP's parameters: 64*64 + 64 + 64*10 + 10 float32, as GradientAllreduce's one bucket.
  std::int64_t numel = 0;
  for (const torch::Tensor& p : digits::make_model(1)->parameters()) numel += p.numel();
  std::vector<at::Tensor> tensors{torch::ones({numel}, torch::kFloat)};
  for (std::int64_t i = 0; i < o.warmup; ++i) engine.allreduce(tensors);
  engine.barrier();
  const auto start = Clock::now();
  for (std::int64_t i = 0; i < o.steps; ++i) {
    tensors[0].fill_(1.0f);  // as the bucket is refilled each step (a memset of 19 KB)
    engine.allreduce(tensors);
  }
  const double secs = secs_since(start);
  char line[160];
  std::snprintf(line, sizeof line, "rank %d allreduce steps %lld secs %.9f bytes %lld",
                engine.rank(), static_cast<long long>(o.steps), secs,
                static_cast<long long>(numel * 4));
  say(line);
}

// ---- hooks: their own cost on the empty step ---------------------------------------------------

inline volatile std::int64_t step_sink = 0;

// bench/torch_loop.cpp's NullBackend: a step that only counts, with what the hooks fetch.
struct NullBackend {
  std::int64_t step = 0;
  void run() noexcept { step_sink = ++step; }
  std::int64_t global_step() const noexcept { return step; }
  float fetch(runhooks::BatchLoss) const noexcept { return 1.0f / static_cast<float>(step); }
  float fetch(runhooks::BatchAccuracy) const noexcept { return 0.5f; }
  void save(const fs::path& prefix) const {
    fs::path file = prefix;
    file += ".null";
    std::ofstream(file) << step;
  }
  void restore(const fs::path& prefix) {
    fs::path file = prefix;
    file += ".null";
    std::ifstream(file) >> step;
  }
};

// Seconds for `steps` empty steps, and the votes taken (0 for the hand-written loop).
template <class Engine>
std::pair<double, std::int64_t> empty_steps(Engine& engine, const std::string& variant,
                                            const std::string& dir, std::int64_t steps) {
  const int rank = engine.rank();
  engine.barrier();
  if (variant == "hand-written") {
    NullBackend backend;
    const auto start = Clock::now();
    while (backend.global_step() < steps) backend.run();
    return {secs_since(start), 0};
  }
  // hooks: the vote never in the window (its per-step check only); vote-every-step: a vote after
  // every step, so that the difference is the price of one vote.
  const runhooks::StopVoteOptions vote{.every_n_steps = variant == "hooks" ? never : 1,
                                       .pipelined = variant == "pipelined-every-step"};
  runhooks::MonitoredSession session{
      runhooks::ChiefSessionCreator([] { return NullBackend{}; }, {.checkpoint_dir = ""},
                                    runhooks::NoRecovery{}),
      runhooks::ChiefStateHook(engine.collective()),
      runhooks::StopAtStepHook({.last_step = steps}),
      runhooks::ChiefOnly(runhooks::StepCounterHook({.every_n_steps = never},
                                                    runhooks::SummaryOutput(dir)),
                          rank == 0),
      runhooks::ChiefOnly(
          runhooks::LoggingTensorHook(runhooks::keys<runhooks::BatchLoss, runhooks::BatchAccuracy>,
                                      {.every_n_iter = never}),
          rank == 0),
      runhooks::ChiefOnly(
          runhooks::SummarySaverHook({.save_steps = never}, dir,
                                     runhooks::scalars<runhooks::BatchLoss, runhooks::BatchAccuracy>),
          rank == 0),
      runhooks::ChiefOnly(
          runhooks::CheckpointSaverHook({.checkpoint_dir = dir, .save_steps = never}), rank == 0),
      runhooks::Voted(runhooks::SignalStopHook()),
      runhooks::StopVoteHook(engine.collective(), vote),
  };
  engine.barrier();  // the chief's state broadcast and files took longer on rank 0
  const auto start = Clock::now();
  while (!session.should_stop()) session.run();
  const double secs = secs_since(start);
  const std::int64_t votes = session.template hook<runhooks::StopVoteHook<decltype(engine.collective())>>().rounds();
  session.close();
  return {secs, votes};
}

template <class Engine>
void hooks(Engine& engine, const Options& o) {
  const std::vector<std::string> variants = {"hand-written", "hooks", "vote-every-step",
                                             "pipelined-every-step"};
  int n = 0;
  for (std::int64_t round = 0; round < o.rounds; ++round)
    for (std::size_t i = 0; i < variants.size(); ++i) {
      const std::string& variant = variants[(i + static_cast<std::size_t>(round)) % variants.size()];
      const std::string dir = o.dir + "/rank" + std::to_string(engine.rank()) + "/" +
                              std::to_string(n++);
      fs::create_directories(dir);
      const bool voting = variant == "vote-every-step" || variant == "pipelined-every-step";
      const std::int64_t steps = voting ? std::max<std::int64_t>(o.steps / 100, 100) : o.steps;
      const auto [secs, votes] = empty_steps(engine, variant, dir, steps);
      char line[200];
      std::snprintf(line, sizeof line, "rank %d hooks %s steps %lld secs %.9f votes %lld",
                    engine.rank(), variant.c_str(), static_cast<long long>(steps), secs,
                    static_cast<long long>(votes));
      say(line);
    }
}

template <class Engine>
int run(Engine& engine, const Options& o) {
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  if (o.loop == "train") train(engine, o);
  else if (o.loop == "allreduce") allreduce(engine, o);
  else hooks(engine, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.engine == "c10d") {
    return runhooks::c10d_run_or_abort([&] {
      C10dEngine engine;
      return run(engine, o);
    });
  }
#if RUNHOOKS_BENCH_MPI
  MpiEngine engine(argc, argv);
  return runhooks::mpi_run_or_abort([&] { return run(engine, o); });
#else
  usage_error("--engine mpi: this build has no MPI (configure with -Dmpi=enabled)");
#endif
}
