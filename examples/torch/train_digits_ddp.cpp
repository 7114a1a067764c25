// train_digits' MLP and data, data-parallel on many processes, as PyTorch's
// DistributedDataParallel trains it: every rank computes the gradients of its shard of the
// global batch, the gradients are averaged over the ranks (runhooks::GradientAllreduce), and
// every rank takes the same optimizer step, so every rank holds the same parameters.
//
//   torchrun --standalone --nproc-per-node 4 --no-python train_digits_ddp --engine c10d
//       --data digits.csv.gz --model-dir DIR          (`./dev demo-torch-ddp`)
//   mpirun -np 4 train_digits_ddp --engine mpi --data digits.csv.gz --model-dir DIR
//                                                     (`./dev demo-mpi torch`)
//   train_digits_ddp --help                           (every option)
//
// Who does what:
//   every rank  ChiefStateHook first: the chief (rank 0) restores the latest checkpoint of
//               --model-dir (ChiefSessionCreator) or keeps its fresh weights, and broadcasts its
//               state; the others restore it, so every rank starts from the chief's parameters,
//               its optimizer state, step, random state and data position, also after torchrun
//               restarted the group. StopAtStepHook at --steps (the same step everywhere),
//               Voted(SignalStopHook) (SIGTERM or SIGINT to any rank stops every rank after the
//               same step), StopVoteHook last.
//   rank 0      (ChiefOnly) checkpoints every --save-steps steps and at the end, the loss and
//               accuracy of its shard every --log-every steps in the log and in TensorBoard
//               files, the step rate.
// Engines: --engine c10d (torchrun's variables, a Gloo process group: C10dEnvironment; an
// error on any rank ends the job with the rank and the error named, a dead or hung peer within
// --timeout-secs) or --engine mpi (MpiEnvironment; an error aborts the job with MPI_Abort).
//
// Every rank prints `rank R starts at step S, parameters hash: H` (or `rank R resumed at step S,
// ...` after a restore) once it holds the chief's state, then, at the end, `rank R stopped at step
// S` and `rank R parameters hash: H` (FNV-1a over the bytes of every parameter: equal on every
// rank, and equal to an uninterrupted run's after a resume). Rank 0 prints the step time and
// `test accuracy: X` on the held-out split.
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
#if RUNHOOKS_EXAMPLE_MPI
#include <runhooks/mpi/mpi_collective.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/torch/distributed/mpi_gradient_allreduce.hpp>
#endif

#include "digits.hpp"

#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace {

struct DdpOptions {
  std::string engine;  // "c10d" or "mpi"
  std::int64_t timeout_secs = 60;
  double bucket_cap_mb = 25.0;
  std::int64_t throw_at_step = 0;  // 0: never (a fault for the tests)
  std::int64_t throw_rank = 1;
};

constexpr const char* usage_text =
    "usage: train_digits_ddp --engine c10d|mpi --data digits.csv.gz --model-dir DIR [--steps N]\n"
    "                        [--save-steps N] [--log-every N] [--seed S] [--timeout-secs N]\n"
    "                        [--bucket-cap-mb X] [--throw-at-step N] [--throw-rank R]\n"
    "  Trains train_digits' MLP data-parallel on every rank of the job and reports its accuracy\n"
    "  on the held-out fifth of the digits. Launch with torchrun (--engine c10d) or mpirun\n"
    "  (--engine mpi). N and S are positive integers.\n"
    "  --engine E        c10d: a Gloo process group from torchrun's variables; mpi: MPI\n"
    "  --data FILE       scikit-learn's digits.csv.gz (tools/fetch_digits.py fetches it)\n"
    "  --model-dir DIR   the chief's checkpoints and TensorBoard files; a job started on a DIR\n"
    "                    that holds a checkpoint resumes every rank from it\n"
    "  --steps N         the last global step (default 1500)\n"
    "  --save-steps N    a checkpoint every N steps (default 500)\n"
    "  --log-every N     log and write the chief's loss and accuracy every N steps (default 250)\n"
    "  --seed S          the initial weights and the order of the batches (default 1)\n"
    "  --timeout-secs N  c10d: how long a rank waits for a peer or the store (default 60)\n"
    "  --bucket-cap-mb X the most MiB of gradients in one allreduce (default 25, as DDP's)\n"
    "  --throw-at-step N a fault for the tests: rank --throw-rank (default 1) throws after step N\n"
    "  The global batch is 32 rows, split evenly over the ranks (1, 2, 4, 8, 16 or 32 of them).\n";

using Model = digits::Model;
template <class Engine>
using Backend = runhooks::TorchBackend<Model, torch::optim::SGD, runhooks::CrossEntropyLoss,
                                       runhooks::GradientAllreduce<Engine>>;

// FNV-1a over the bytes of every parameter, in model order.
std::uint64_t parameters_hash(Model& model) {
  std::uint64_t hash = 1469598103934665603ull;
  for (const torch::Tensor& p : model->parameters()) {
    const torch::Tensor bytes = p.detach().contiguous();
    const auto* data = static_cast<const unsigned char*>(bytes.const_data_ptr());
    for (std::size_t i = 0; i < bytes.nbytes(); ++i) {
      hash ^= data[i];
      hash *= 1099511628211ull;
    }
  }
  return hash;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);  // one write per line: ranks share the terminal
  std::fflush(stdout);
}

// Every rank, once it holds the chief's state: where it starts, and the parameters' hash.
template <class Engine>
struct StartReport {
  int rank;
  void after_create_session(Backend<Engine>& backend) const {
    const std::int64_t step = backend.global_step();
    say("rank " + std::to_string(rank) + (step > 0 ? " resumed at step " : " starts at step ") +
        std::to_string(step) + ", parameters hash: " +
        std::to_string(parameters_hash(backend.model())));
  }
};

// A fault for the tests: rank `rank` throws after step `step` (0: never).
struct ThrowAtStep {
  int my_rank, rank;
  std::int64_t step;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) const {
    if (step > 0 && my_rank == rank && run_context.session().global_step() == step)
      throw std::runtime_error("an injected failure after step " + std::to_string(step) +
                               " (--throw-at-step)");
  }
};

// The run on one rank, whatever the engine: make_collective() gives a runhooks::Collective,
// make_engine() the gradient allreduce's engine (each called once on every rank, in the same
// order: an MPI communicator's duplication is collective).
template <class Engine, class MakeCollective, class MakeEngine>
int train(const digits::Options& options, const DdpOptions& ddp, int rank, int size,
          MakeCollective make_collective, MakeEngine make_engine) {
  torch::set_num_threads(1);  // one thread per rank: the ranks share the cores
  const digits::Split data = digits::split(digits::load_digits(options.data));
  const runhooks::TensorBatches batches =
      digits::train_batches(data, options.seed, {.rank = rank, .num_replicas = size});
  if (rank == 0)
    say("training on " + std::to_string(data.train_images.size(0)) + " images over " +
        std::to_string(size) + " ranks (" + std::to_string(batches.local_batch_size()) +
        " of each global batch of " + std::to_string(batches.batch_size()) + " per rank), " +
        std::to_string(options.steps) + " steps; model directory " + options.model_dir);

  std::optional<Engine> engine(make_engine());
  const auto make_backend = [&] {
    if (!engine)
      throw std::logic_error("train_digits_ddp: the backend was made twice on one rank");
    runhooks::GradientAllreduce<Engine> sync(std::move(*engine),
                                             {.bucket_cap_mb = ddp.bucket_cap_mb});
    engine.reset();
    return Backend<Engine>(digits::make_model(options.seed), batches, std::move(sync),
                           torch::optim::SGDOptions(0.05).momentum(0.9));
  };
  auto chief_state = make_collective();
  auto vote = make_collective();
  const std::string& dir = options.model_dir;
  const auto run = [&](auto creator) {
    runhooks::MonitoredSession session{
        std::move(creator),
        runhooks::ChiefStateHook(std::move(chief_state)),
        StartReport<Engine>{rank},
        runhooks::StopAtStepHook({.last_step = options.steps}),
        runhooks::ChiefOnly(runhooks::StepCounterHook({.every_n_steps = options.log_every},
                                                      runhooks::SummaryOutput(dir)),
                            rank == 0),
        runhooks::ChiefOnly(
            runhooks::LoggingTensorHook(runhooks::keys<runhooks::BatchLoss, runhooks::BatchAccuracy>,
                                        {.every_n_iter = options.log_every}),
            rank == 0),
        runhooks::ChiefOnly(
            runhooks::SummarySaverHook({.save_steps = options.log_every}, dir,
                                       runhooks::scalars<runhooks::BatchLoss, runhooks::BatchAccuracy>),
            rank == 0),
        runhooks::ChiefOnly(
            runhooks::CheckpointSaverHook({.checkpoint_dir = dir, .save_steps = options.save_steps}),
            rank == 0),
        runhooks::Voted(runhooks::SignalStopHook()),
        ThrowAtStep{rank, static_cast<int>(ddp.throw_rank), ddp.throw_at_step},
        runhooks::StopVoteHook(std::move(vote)),
    };
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t first_step = session.raw_session().global_step();
    runhooks::run_loop(session);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Backend<Engine>& backend = session.raw_session();
    const std::int64_t last_step = backend.global_step(), ran = last_step - first_step;
    say("rank " + std::to_string(rank) + " stopped at step " + std::to_string(last_step));
    say("rank " + std::to_string(rank) + " parameters hash: " +
        std::to_string(parameters_hash(backend.model())));
    if (rank == 0) {
      const auto& sync = backend.gradient_sync();
      char line[200];
      std::snprintf(line, sizeof line,
                    "trained %lld steps in %.2f s: %.1f us/step, of which %.1f us in the gradient "
                    "allreduce (%zu bucket(s))",
                    static_cast<long long>(ran), secs, ran > 0 ? 1e6 * secs / static_cast<double>(ran) : 0.0,
                    sync.calls() > 0 ? 1e6 * sync.seconds() / static_cast<double>(sync.calls()) : 0.0,
                    sync.bucket_bytes().size());
      say(line);
      std::snprintf(line, sizeof line, "test accuracy: %.4f on the held-out split (%lld images)",
                    double{backend.accuracy(data.test_images, data.test_labels)},
                    static_cast<long long>(data.test_images.size(0)));
      say(line);
    }
  };
  // The chief restores the latest checkpoint of --model-dir; the others take its state. Never a
  // recovery: a rank re-created alone would leave the others' collectives.
  run(runhooks::ChiefSessionCreator(make_backend,
                                    {.checkpoint_dir = rank == 0 ? std::string_view(dir) : ""},
                                    runhooks::NoRecovery{}));
  return 0;
}

void set_rank_log_sink(int rank) {
  static int log_rank = 0;
  log_rank = rank;
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    say("[rank " + std::to_string(log_rank) + "] " + std::string(line));
  });
}

}  // namespace

int main(int argc, char** argv) {
  digits::program = "train_digits_ddp";
  // A bad option under torchrun: its failure report shows the line (not a link on tracebacks).
  digits::on_usage_error = [](const std::string& line) { runhooks::write_torchrun_error_file(line); };
  DdpOptions ddp;
  const digits::Options options = digits::parse(
      argc, argv, usage_text,
      {"--engine", "--timeout-secs", "--bucket-cap-mb", "--throw-at-step", "--throw-rank"},
      [&](std::string_view option, std::string_view value) {
        if (option == "--engine") {
          if (value != "c10d" && value != "mpi")
            digits::usage_error("--engine must be c10d or mpi, got '" + std::string(value) + "'");
          ddp.engine = value;
        } else if (option == "--timeout-secs") {
          ddp.timeout_secs = digits::positive(option, value);
        } else if (option == "--bucket-cap-mb") {
          const std::string text(value);
          char* end = nullptr;
          const double mb = std::strtod(text.c_str(), &end);
          try {
            if (text.empty() || *end != '\0') throw std::invalid_argument("not a number");
            runhooks::GradientAllreduceOptions{.bucket_cap_mb = mb}.validate();
          } catch (const std::invalid_argument&) {
            digits::usage_error("--bucket-cap-mb must be a number of MiB greater than 0 and at "
                                "most 1e6, got '" + text + "'");
          }
          ddp.bucket_cap_mb = mb;
        } else if (option == "--throw-at-step") {
          ddp.throw_at_step = digits::positive(option, value);
        } else {
          ddp.throw_rank = digits::positive(option, value);
        }
      });
  if (ddp.engine.empty()) digits::usage_error("--engine is required (c10d or mpi)");
  if (options.model_dir.empty())
    digits::usage_error("--model-dir is required: a restarted job resumes from its checkpoints");

  if (ddp.engine == "c10d") {
    return runhooks::c10d_run_or_abort([&] {
      runhooks::C10dEnvironment env({.timeout_secs = static_cast<double>(ddp.timeout_secs)});
      set_rank_log_sink(env.rank());
      return train<runhooks::C10dAllreduceSum>(
          options, ddp, env.rank(), env.size(), [&] { return env.collective(); },
          [&] { return runhooks::C10dAllreduceSum(env.process_group()); });
    });
  }
#if RUNHOOKS_EXAMPLE_MPI
  runhooks::MpiEnvironment env(argc, argv);
  return runhooks::mpi_run_or_abort([&] {
    const int rank = runhooks::MpiEnvironment::rank(), size = runhooks::MpiEnvironment::size();
    set_rank_log_sink(rank);
    return train<runhooks::MpiAllreduceSum>(
        options, ddp, rank, size, [] { return runhooks::MpiCollective(MPI_COMM_WORLD); },
        [] { return runhooks::MpiAllreduceSum(MPI_COMM_WORLD); });
  });
#else
  digits::usage_error("--engine mpi: this build has no MPI (configure with -Dmpi=enabled)");
#endif
}
