// A data-parallel trainer for the fault tests (tests/mpi/mpi_faults.py): every step is a busy
// loop of --step-us microseconds and a gradient MPI_Allreduce, so the ranks step in lockstep and
// a rank that stops alone, dies or throws leaves the others blocked in a collective. Rank 0
// restores the latest checkpoint of --checkpoint-dir and saves one every --save-steps steps and
// at the end; the others receive its state (MpiSessionCreator). SIGTERM or SIGINT to any rank
// stops every rank at the next vote (SignalStopHook in MpiVoted).
//
// What it prints, for the driver:
//   "rank R pid P started at step S"   once the session exists (stdout)
//   "rank R stopped at step S"         from a hook's end() (stdout)
// Fault injection: --throw-rank R --throw-at-step S makes rank R's backend throw
// std::runtime_error("injected failure at step S") in that step; --throw-mode says who handles
// it: run_or_abort (main wraps the training in mpi_run_or_abort), uncaught (nobody: the terminate
// handler of MpiEnvironment), caught (main catches it, prints it and returns 0, so
// ~MpiEnvironment must abort the job instead of finalizing). --chief-delay-secs D makes rank 0
// take D seconds to create its backend; --max-wait-secs W is how long the others wait for it.

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
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

namespace {

struct Options {
  std::int64_t steps = 1000;
  std::string checkpoint_dir;
  std::int64_t save_steps = 100;
  double step_us = 200.0;
  int throw_rank = -1;
  std::int64_t throw_at_step = -1;
  std::string throw_mode = "run_or_abort";
  double chief_delay_secs = 0.0;  // rank 0 sleeps this long in its factory: a slow chief
  double max_wait_secs = 7200.0;  // MpiSessionOptions::max_wait_secs
};

class Backend {
 public:
  Backend(int rank, const Options& options) : rank_(rank), options_(&options) {}

  void run() {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration<double, std::micro>(options_->step_us);
    while (std::chrono::steady_clock::now() < until) {
    }
    if (rank_ == options_->throw_rank && step_ + 1 == options_->throw_at_step)
      throw std::runtime_error("injected failure at step " + std::to_string(step_ + 1));
    std::array<double, 8> gradient{};
    for (std::size_t i = 0; i < gradient.size(); ++i)
      gradient[i] = static_cast<double>(rank_ + 1) * 1e-3 * static_cast<double>(i + 1);
    MPI_Allreduce(MPI_IN_PLACE, gradient.data(), static_cast<int>(gradient.size()), MPI_DOUBLE,
                  MPI_SUM, MPI_COMM_WORLD);
    for (std::size_t i = 0; i < gradient.size(); ++i) weights_[i] -= gradient[i];
    ++step_;
  }
  std::int64_t global_step() const { return step_; }

  void save(const std::filesystem::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("weights", weights_);
    out.add("global_step", step_);
    out.close();
  }
  void restore(const std::filesystem::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    std::array<double, 8> weights{};
    in.read("weights", weights);
    const std::int64_t step = in.scalar<std::int64_t>("global_step");
    weights_ = weights;
    step_ = step;
  }

 private:
  int rank_;
  const Options* options_;
  std::array<double, 8> weights_{};
  std::int64_t step_ = 0;
};

struct AnnounceHook {
  int rank;
  void after_create_session(Backend& session) {
    std::printf("rank %d pid %d started at step %lld\n", rank, static_cast<int>(::getpid()),
                static_cast<long long>(session.global_step()));
    std::fflush(stdout);
  }
  void end(Backend& session) {
    std::printf("rank %d stopped at step %lld\n", rank,
                static_cast<long long>(session.global_step()));
    std::fflush(stdout);
  }
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view arg = argv[i];
    const char* value = argv[i + 1];
    if (arg == "--steps")
      options.steps = std::atoll(value);
    else if (arg == "--checkpoint-dir")
      options.checkpoint_dir = value;
    else if (arg == "--save-steps")
      options.save_steps = std::atoll(value);
    else if (arg == "--step-us")
      options.step_us = std::atof(value);
    else if (arg == "--throw-rank")
      options.throw_rank = std::atoi(value);
    else if (arg == "--throw-at-step")
      options.throw_at_step = std::atoll(value);
    else if (arg == "--throw-mode")
      options.throw_mode = value;
    else if (arg == "--chief-delay-secs")
      options.chief_delay_secs = std::atof(value);
    else if (arg == "--max-wait-secs")
      options.max_wait_secs = std::atof(value);
    else
      throw std::invalid_argument("trainer: unknown argument '" + std::string(arg) + "'");
  }
  if (options.checkpoint_dir.empty())
    throw std::invalid_argument("trainer: --checkpoint-dir is required");
  return options;
}

void train(const Options& options, int rank) {
  runhooks::ChiefSessionCreator chief(
      [&] {
        if (rank == 0 && options.chief_delay_secs > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(options.chief_delay_secs));
        return Backend(rank, options);
      },
      {.checkpoint_dir = options.checkpoint_dir});
  runhooks::MonitoredSession session(
      runhooks::MpiSessionCreator(std::move(chief), {.max_wait_secs = options.max_wait_secs}),
      runhooks::StopAtStepHook({.last_step = options.steps}),
      runhooks::MpiChiefOnly(runhooks::CheckpointSaverHook(
          {.checkpoint_dir = options.checkpoint_dir, .save_steps = options.save_steps})),
      runhooks::MpiVoted(runhooks::SignalStopHook()), AnnounceHook{rank},
      runhooks::MpiStopVoteHook());
  runhooks::run_loop(session);
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const int rank = env.rank();
  runhooks::set_log_sink([](runhooks::Severity severity, std::string_view line) {
    std::fprintf(stderr, "[rank %d] %s %.*s\n", runhooks::MpiEnvironment::rank(),
                 severity == runhooks::Severity::info ? "I" : "W", static_cast<int>(line.size()),
                 line.data());
  });
  const Options options = runhooks::mpi_run_or_abort([&] { return parse(argc, argv); });
  if (options.throw_mode == "uncaught") {
    train(options, rank);
  } else if (options.throw_mode == "caught") {
    try {
      train(options, rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d caught: %s\n", rank, e.what());
    }
  } else {
    runhooks::mpi_run_or_abort([&] { train(options, rank); });
  }
  return 0;
}
