// Data-parallel SGD under MPI: the demo's logistic regression (examples/logistic_regression.hpp),
// each rank training on its own shard of the data, gradients averaged with MPI_Allreduce in every
// step, so every rank holds the same weights and steps in lockstep.
//
//   ./dev demo-mpi      # builds build/demo-mpi/examples/mpi_data_parallel, runs it on 4 ranks
//   mpirun -np 4 build/demo-mpi/examples/mpi_data_parallel --steps 20000 --checkpoint-dir /tmp/ckpt
//
// (mpirun wants --oversubscribe on fewer than 4 cores, --allow-run-as-root as root.)
//
// Who does what:
//   every rank   StopAtStepHook on its local step (all ranks reach it at the same step, no
//                communication), SignalStopHook wrapped in MpiVoted (SIGTERM or SIGINT to any
//                rank stops all of them at the next vote), MpiStopVoteHook last;
//   rank 0       (MpiChiefOnly) one log line every --log-steps steps, and CheckpointSaverHook:
//                a checkpoint every --save-steps steps and a final one at the end;
//   start        MpiSessionCreator: rank 0 restores the latest checkpoint of --checkpoint-dir
//                (ChiefSessionCreator), the others receive its state by broadcast, so a restarted
//                job resumes every rank from the chief's last checkpoint.
// Every rank prints "rank R stopped at step S" once, from a hook's end(). The program checks what
// it claims (every rank at the same step with the same weights; the loss fell) and fails
// otherwise. An error on any rank is printed with its rank and aborts the whole job.

#include "logistic_regression.hpp"

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/mpi/mpi_chief_only.hpp>
#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_session_creator.hpp>
#include <runhooks/mpi/mpi_stop_vote_hook.hpp>

#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using demo::Example;
using demo::Loss;
using demo::num_features;
using demo::Weights;

// One rank's part of a data-parallel step. The mini-batch of step s on rank r is drawn by a
// generator seeded with (seed, r, s), so the training state is the same on every rank (weights,
// learning rate, step): the chief's checkpoint is every rank's, and a restart draws the same
// batches as an uninterrupted run would have.
class DataParallelSgd {
 public:
  DataParallelSgd(std::vector<Example> shard, std::size_t batch_size, unsigned seed, int rank,
                  int ranks)
      : shard_(std::move(shard)), batch_size_(batch_size), seed_(seed), rank_(rank),
        ranks_(ranks) {}

  void run() {
    std::seed_seq seq{seed_, static_cast<unsigned>(rank_), static_cast<unsigned>(step_),
                      static_cast<unsigned>(step_ >> 32)};
    std::mt19937 rng(seq);
    std::uniform_int_distribution<std::size_t> pick(0, shard_.size() - 1);
    Weights gradient{};
    for (std::size_t i = 0; i < batch_size_; ++i) {
      const Example& e = shard_[pick(rng)];
      const double error = demo::sigmoid(demo::logit(weights_, e)) - e.label;
      for (std::size_t j = 0; j < num_features; ++j) gradient[j] += error * e.x[j];
      gradient[num_features] += error;
    }
    // The average over all ranks' mini-batches: every rank applies the same update.
    runhooks::detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, gradient.data(),
                                              static_cast<int>(gradient.size()), MPI_DOUBLE,
                                              MPI_SUM, MPI_COMM_WORLD),
                                "MPI_Allreduce");
    const double scale = learning_rate_ / static_cast<double>(batch_size_ * static_cast<std::size_t>(ranks_));
    for (std::size_t j = 0; j <= num_features; ++j) weights_[j] -= scale * gradient[j];
    ++step_;
  }
  std::int64_t global_step() const { return step_; }

  // Mean log loss over this rank's shard (rank 0 logs its own).
  float fetch(Loss) const {
    double sum = 0.0;
    for (const Example& e : shard_) {
      const double p = demo::sigmoid(demo::logit(weights_, e));
      sum -= e.label > 0.5 ? std::log(p) : std::log1p(-p);
    }
    return static_cast<float>(sum / static_cast<double>(shard_.size()));
  }

  // Checkpointable: the state shared by all ranks, to <prefix>.arrays.
  void save(const std::filesystem::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("weights", weights_);
    out.add("learning_rate", learning_rate_);
    out.add("global_step", step_);
    out.close();
  }
  void restore(const std::filesystem::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    Weights weights{};
    in.read("weights", weights);
    const double learning_rate = in.scalar<double>("learning_rate");
    const std::int64_t step = in.scalar<std::int64_t>("global_step");
    weights_ = weights;
    learning_rate_ = learning_rate;
    step_ = step;
  }

  const Weights& weights() const { return weights_; }

 private:
  std::vector<Example> shard_;
  std::size_t batch_size_;
  unsigned seed_;
  int rank_;
  int ranks_;
  Weights weights_{};
  double learning_rate_ = 0.1;
  std::int64_t step_ = 0;
};

// Rank 0's log: "step S loss L (R steps/s)" every n steps. The full-shard loss is fetched only
// on those steps.
class ProgressLogHook {
 public:
  explicit ProgressLogHook(std::int64_t every_n_steps) : every_n_steps_(every_n_steps) {}

  auto before_run(auto& run_context) const {
    const std::int64_t next = run_context.session().global_step() + 1;
    return runhooks::SessionRunArgs{runhooks::fetch<Loss>(next % every_n_steps_ == 0)};
  }
  void after_run(auto& run_context, const auto& run_values) {
    const std::optional<float>& loss = run_values[Loss{}];
    if (!loss) return;
    const auto now = std::chrono::steady_clock::now();
    const std::int64_t step = run_context.session().global_step();
    if (last_step_ < 0)
      std::printf("step %lld loss %.4f\n", static_cast<long long>(step), double{*loss});
    else
      std::printf("step %lld loss %.4f (%.0f steps/s)\n", static_cast<long long>(step),
                  double{*loss},
                  static_cast<double>(step - last_step_) /
                      std::chrono::duration<double>(now - last_time_).count());
    std::fflush(stdout);
    last_step_ = step;
    last_time_ = now;
  }

 private:
  std::int64_t every_n_steps_;
  std::int64_t last_step_ = -1;
  std::chrono::steady_clock::time_point last_time_{};
};

// What a rank ends with, for the checks in main().
struct Final {
  std::int64_t step = -1;
  Weights weights{};
  float loss = 0.0f;
};

// Every rank: "rank R stopped at step S", printed from end() (so it shows that end() ran).
struct ReportHook {
  int rank;
  Final* final;
  void end(DataParallelSgd& session) {
    *final = {session.global_step(), session.weights(), session.fetch(Loss{})};
    std::printf("rank %d stopped at step %lld\n", rank, static_cast<long long>(final->step));
    std::fflush(stdout);
  }
};

struct Options {
  std::int64_t steps = 20000;
  std::string checkpoint_dir;
  std::int64_t save_steps = 5000;
  std::int64_t log_steps = 1000;
  std::int64_t vote_every = 0;  // 0: MpiStopVoteOptions' default rhythm
};

[[noreturn]] void usage_error(const std::string& message) {
  if (runhooks::MpiEnvironment::rank() == 0)
    std::fprintf(stderr,
                 "mpi_data_parallel: %s\nusage: mpirun -np N mpi_data_parallel [--steps N] "
                 "[--checkpoint-dir DIR] [--save-steps N] [--log-steps N] [--vote-every N]\n",
                 message.c_str());
  MPI_Finalize();
  std::exit(2);
}

std::int64_t parse_count(std::string_view option, const char* text, std::int64_t min) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || value < min)
    usage_error(std::string(option) + " must be an integer of at least " + std::to_string(min) +
                ", got '" + text + "'");
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) usage_error(arg.starts_with("--") ? std::string(arg) + " needs a value"
                                                          : "unknown argument '" + std::string(arg) + "'");
    const char* value = argv[++i];
    if (arg == "--steps")
      options.steps = parse_count(arg, value, 0);
    else if (arg == "--checkpoint-dir")
      options.checkpoint_dir = value;
    else if (arg == "--save-steps")
      options.save_steps = parse_count(arg, value, 1);
    else if (arg == "--log-steps")
      options.log_steps = parse_count(arg, value, 1);
    else if (arg == "--vote-every")
      options.vote_every = parse_count(arg, value, 0);
    else
      usage_error("unknown argument '" + std::string(arg) + "'");
  }
  return options;
}

// The hooks every configuration shares, then the run.
template <class Creator, class... ChiefHooks>
Final train(Creator creator, const Options& options, int rank, ChiefHooks... chief_hooks) {
  Final final;
  runhooks::MpiStopVoteOptions vote;
  if (options.vote_every > 0) vote.every_n_steps = options.vote_every;
  runhooks::MonitoredSession session(
      std::move(creator), runhooks::StopAtStepHook({.last_step = options.steps}),
      runhooks::MpiChiefOnly(ProgressLogHook(options.log_steps)),
      runhooks::MpiChiefOnly(std::move(chief_hooks))...,
      runhooks::MpiVoted(runhooks::SignalStopHook()), ReportHook{rank, &final},
      runhooks::MpiStopVoteHook(vote));
  runhooks::run_loop(session);
  return final;
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const Options options = parse(argc, argv);
  const int rank = env.rank(), ranks = env.size();
  // Log lines (restores, checkpoints, the vote) to stderr, with the rank.
  runhooks::set_log_sink([](runhooks::Severity severity, std::string_view line) {
    std::fprintf(stderr, "[rank %d] %s %.*s\n", runhooks::MpiEnvironment::rank(),
                 severity == runhooks::Severity::info ? "I" : "W", static_cast<int>(line.size()),
                 line.data());
  });

  return runhooks::mpi_run_or_abort([&] {
    const demo::Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
    std::mt19937 data_rng(2024);
    const std::vector<Example> data = demo::make_data(true_weights, 4000, data_rng);
    std::vector<Example> shard;
    for (std::size_t i = static_cast<std::size_t>(rank); i < data.size();
         i += static_cast<std::size_t>(ranks))
      shard.push_back(data[i]);
    const auto factory = [&] { return DataParallelSgd(shard, 16, 7, rank, ranks); };
    const float initial_loss = factory().fetch(Loss{});

    Final final;
    if (options.checkpoint_dir.empty()) {
      final = train(runhooks::MpiSessionCreator(factory), options, rank);
    } else {
      runhooks::ChiefSessionCreator chief(factory, {.checkpoint_dir = options.checkpoint_dir});
      final = train(runhooks::MpiSessionCreator(std::move(chief)), options, rank,
                    runhooks::CheckpointSaverHook({.checkpoint_dir = options.checkpoint_dir,
                                                   .save_steps = options.save_steps}));
    }

    // The claims: every rank stopped at the same step, with the same weights, and they learned.
    std::int64_t steps[2] = {final.step, -final.step}, extremes[2] = {0, 0};
    MPI_Allreduce(steps, extremes, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    Weights chief_weights = final.weights;
    MPI_Bcast(chief_weights.data(), static_cast<int>(chief_weights.size()), MPI_DOUBLE, 0,
              MPI_COMM_WORLD);
    bool ok = extremes[0] == -extremes[1];
    if (!ok) std::fprintf(stderr, "FAILED: rank %d: the ranks stopped at different steps\n", rank);
    for (std::size_t j = 0; j <= num_features; ++j)
      if (std::abs(final.weights[j] - chief_weights[j]) > 1e-12) {
        std::fprintf(stderr, "FAILED: rank %d: weight %zu differs from rank 0's\n", rank, j);
        ok = false;
      }
    if (rank == 0) {
      std::printf("all %d ranks stopped at step %lld; loss on rank 0's shard %.4f -> %.4f\n",
                  ranks, static_cast<long long>(final.step), double{initial_loss},
                  double{final.loss});
      if (final.step >= 1000 && !(final.loss < 0.8f * initial_loss)) {
        std::fprintf(stderr, "FAILED: the loss did not fall\n");
        ok = false;
      }
    }
    int mine = ok ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
  });
}
