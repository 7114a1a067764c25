// mpi_make_training_session under mpirun -np 4: only rank 0 is the chief (it writes the
// checkpoints, the others never see its directory); a second session resumes every rank from
// the chief's last checkpoint, received by broadcast; a vote cast on one rank stops every rank
// after the same step; bad options still name the option.

#include <runhooks/mpi/mpi_environment.hpp>
#include <runhooks/mpi/mpi_training_session.hpp>

#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/log.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "mpi_check.hpp"

namespace {

// Lockstep: a gradient allreduce in every step.
struct Backend {
  std::int64_t step = 0;
  double weight = 0.0;
  void run() {
    double gradient = 1.0, sum = 0.0;
    MPI_Allreduce(&gradient, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    weight -= 0.01 * sum;
    ++step;
  }
  std::int64_t global_step() const { return step; }
  void save(const std::filesystem::path& prefix) const {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", step);
    out.add("weight", weight);
    out.close();
  }
  void restore(const std::filesystem::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    step = in.scalar<std::int64_t>("global_step");
    weight = in.scalar<double>("weight");
  }
};

struct Seen {
  std::optional<std::int64_t> first;  // the step at the first after_create_session
  std::int64_t last = -1;             // the step at end()
  double weight = 0.0;
};

struct Observe {
  Seen* seen;
  void after_create_session(Backend& session) {
    if (!seen->first) seen->first = session.step;
  }
  void end(Backend& session) {
    seen->last = session.step;
    seen->weight = session.weight;
  }
};

// Casts a vote on one rank after one step.
struct VoteOnOneRank {
  int rank;
  std::int64_t at;
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    if (runhooks::MpiEnvironment::rank() == rank && run_context.session().step == at)
      runhooks::mpi_request_stop();
  }
};

bool same_on_all_ranks(std::int64_t value) {
  std::int64_t send[2] = {value, -value}, receive[2];
  MPI_Allreduce(send, receive, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return receive[0] == -receive[1];
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::MpiEnvironment env(argc, argv);
  const int rank = env.rank();
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});

  // The chief's directory: named by rank 0 only, so no other rank could find it by accident.
  std::string directory;
  if (rank == 0) {
    char name[] = "/tmp/runhooks-mpi-training-XXXXXX";
    if (!mkdtemp(name)) std::abort();
    directory = name;
  }
  const std::string checkpoint_dir = rank == 0 ? directory + "/ckpt" : "/nonexistent/not-the-chief";

  {  // 100 steps, checkpoints every 40 steps and at the end, on the chief only.
    Seen seen;
    auto session = runhooks::mpi_make_training_session(
        {.checkpoint_dir = checkpoint_dir, .save_checkpoint_steps = 40,
         .save_summaries_steps = 0, .log_step_count_steps = 0},
        {.vote = {.every_n_steps = 10}}, [] { return Backend{}; },
        runhooks::StopAtStepHook({.last_step = 100}), Observe{&seen});
    runhooks::run_loop(session);
    MPI_CHECK(seen.first == 0);
    MPI_CHECK(seen.last == 100);
    MPI_CHECK(same_on_all_ranks(seen.last));
    if (rank == 0) {
      const auto latest = runhooks::latest_checkpoint(checkpoint_dir);
      MPI_CHECK(latest.has_value());
      MPI_CHECK(latest && latest->filename().string() == "model.ckpt-100");
    }
    MPI_CHECK(!std::filesystem::exists("/nonexistent/not-the-chief"));
  }

  {  // A new session resumes every rank from the chief's step 100 (so num_steps counts from 100
     // on every rank); a vote cast on rank 2 after step 123 stops every rank at the next vote
     // step, 130.
    Seen seen;
    auto session = runhooks::mpi_make_training_session(
        {.checkpoint_dir = checkpoint_dir, .save_checkpoint_steps = 1000,
         .save_summaries_steps = 0, .log_step_count_steps = 0},
        {.vote = {.every_n_steps = 10}}, [] { return Backend{}; },
        runhooks::StopAtStepHook({.num_steps = 900}), VoteOnOneRank{2, 123}, Observe{&seen});
    runhooks::run_loop(session);
    MPI_CHECK(seen.first == 100);
    MPI_CHECK(seen.last == 130);
    MPI_CHECK(same_on_all_ranks(seen.last));
    MPI_CHECK(same_on_all_ranks(static_cast<std::int64_t>(seen.weight * 1e6)));
    if (rank == 0) {
      const auto latest = runhooks::latest_checkpoint(checkpoint_dir);
      MPI_CHECK(latest && latest->filename().string() == "model.ckpt-130");
    }
  }

  {  // Bad options still name the option and the value.
    std::string message;
    try {
      runhooks::mpi_make_training_session({.checkpoint_dir = checkpoint_dir},
                                          {.vote = {.every_n_steps = -3}},
                                          [] { return Backend{}; });
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    MPI_CHECK(message.find("every_n_steps must be at least 0") != std::string::npos);
  }

  if (rank == 0) std::filesystem::remove_all(directory);
  return mpi_check_result("mpi_training_session");
}
