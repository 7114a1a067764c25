// The process that tests/checkpoint/checkpoint_faults.cpp and checkpoint_tf_interop.py start,
// kill and restart: trains the demo backend (examples/logistic_regression.hpp) with checkpoints.
//
//   checkpoint_helper --checkpoint-dir DIR --steps N [--save-steps K] [--async] [--extra N]
//                     [--step-us U] [--fsize-limit BYTES [--fsize-limit-at-step S]]
//                     [--start-fresh] [--best K]
//   checkpoint_helper --print-state DIR
//
// --print-state prints what runhooks reads from DIR's state file: "model_checkpoint_path P",
// one "all_model_checkpoint_paths P" per entry, and "latest P" from latest_checkpoint().
//
// Trains up to global step N under a MonitoredSession with ChiefSessionCreator (restores the
// latest checkpoint of DIR), StopAtStepHook, SignalStopHook and CheckpointSaverHook(save_steps K,
// default 3; max_to_keep 3; asynchronous with --async). --extra adds N doubles of state; --step-us
// sleeps U microseconds per step. --fsize-limit sets RLIMIT_FSIZE (SIGXFSZ ignored, so a write
// past it fails with EFBIG) at the start, or once a save at step S or later is durable.
// --start-fresh sets ChiefSessionOptions::start_fresh: the first backend starts at step 0 whatever
// DIR holds (tests/checkpoint/checkpoint_tf_directories.py: a directory whose latest checkpoint
// is TensorFlow's, which the demo backend cannot read). --best K adds a BestCheckpointHook on the
// demo's Loss, checked every second step, keeping the best K besides the latest 3 (without it
// the hook is there, linked, and never fetches).
// Writes one line per event to stdout, each in one write(2): "resumed S" once the session is
// created, "saved S" once a save is durable, "end checkpoint S" and "end reporter S" from the
// end() of the hooks, "finished S" and "signal NAME" at the end. Exit status 0; 2 for bad usage;
// 3 with "error: WHAT" for an exception.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include <runhooks/checkpoint/best_checkpoint_hook.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/monitored_session.hpp>

#include "logistic_regression.hpp"

namespace {

void say(const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const ::ssize_t written = ::write(STDOUT_FILENO, text.data(), text.size());
}

void limit_file_size(std::uint64_t bytes) {
  std::signal(SIGXFSZ, SIG_IGN);
  const struct rlimit limit {static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
    std::perror("setrlimit");
    std::exit(2);
  }
}

std::int64_t last_reported_save = -1;

struct ReportSaves {
  template <class Session>
  void after_save(Session&, std::int64_t step) {
    say("saved " + std::to_string(step));
    last_reported_save = step;
  }
  template <class Session>
  void end(Session&, std::int64_t step) {
    say("end checkpoint " + std::to_string(step));
  }
};

struct Reporter {
  std::int64_t step_us = 0;
  std::int64_t limit_at_step = -1;
  std::uint64_t limit_bytes = 0;
  template <class Ctx>
  void before_run(Ctx&) {
    if (step_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(step_us));
  }
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    // Once a save at or after limit_at_step is durable (in async mode, reported some steps later).
    if (limit_at_step >= 0 && last_reported_save >= limit_at_step &&
        run_context.session().global_step() >= limit_at_step) {
      limit_file_size(limit_bytes);
      limit_at_step = -1;
    }
  }
  template <class Backend>
  void end(Backend& backend) {
    say("end reporter " + std::to_string(backend.global_step()));
  }
};

demo::LogisticRegression make_backend(std::size_t extra) {
  const demo::Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
  std::mt19937 rng(2024);
  return demo::LogisticRegression(demo::make_data(true_weights, 4000, rng), 16, 7, extra);
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "checkpoint_helper: %s\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  std::int64_t steps = -1, save_steps = 3, step_us = 0, limit_at_step = -1;
  std::size_t extra = 0;
  std::int64_t fsize_limit = -1, best = -1;
  bool async = false, start_fresh = false;
  if (argc == 3 && std::string_view(argv[1]) == "--print-state") {
    try {
      const auto state = runhooks::get_checkpoint_state(argv[2]);
      if (!state) {
        say("no state");
        return 0;
      }
      say("model_checkpoint_path " + state->model_checkpoint_path);
      for (const std::string& path : state->all_model_checkpoint_paths)
        say("all_model_checkpoint_paths " + path);
      say("latest " + runhooks::latest_checkpoint(argv[2])->string());
      return 0;
    } catch (const std::exception& e) {
      say(std::string("error: ") + e.what());
      return 3;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("an option lacks its value");
      return argv[++i];
    };
    if (arg == "--checkpoint-dir") dir = value();
    else if (arg == "--steps") steps = std::stoll(value());
    else if (arg == "--save-steps") save_steps = std::stoll(value());
    else if (arg == "--async") async = true;
    else if (arg == "--start-fresh") start_fresh = true;
    else if (arg == "--best") best = std::stoll(value());
    else if (arg == "--extra") extra = std::stoul(value());
    else if (arg == "--step-us") step_us = std::stoll(value());
    else if (arg == "--fsize-limit") fsize_limit = std::stoll(value());
    else if (arg == "--fsize-limit-at-step") limit_at_step = std::stoll(value());
    else usage("unknown argument");
  }
  if (dir.empty() || steps < 0) usage("--checkpoint-dir and --steps are required");
  if (fsize_limit >= 0 && limit_at_step < 0) limit_file_size(static_cast<std::uint64_t>(fsize_limit));

  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  try {
    runhooks::MonitoredSession session{
        runhooks::ChiefSessionCreator([extra] { return make_backend(extra); },
                                      {.checkpoint_dir = dir, .start_fresh = start_fresh}),
        runhooks::StopAtStepHook({.last_step = steps}),
        runhooks::SignalStopHook{},
        runhooks::BestCheckpointHook<demo::Loss>(
            {.save_top_k = best < 0 ? 0 : best,
             .every_n_iter = best < 0 ? std::numeric_limits<std::int64_t>::max() : 2}),
        runhooks::CheckpointSaverHook({.checkpoint_dir = dir,
                                       .save_steps = save_steps,
                                       .max_to_keep = 3,
                                       .async_save = async},
                                      ReportSaves{}),
        Reporter{.step_us = step_us,
                 .limit_at_step = limit_at_step,
                 .limit_bytes = static_cast<std::uint64_t>(fsize_limit < 0 ? 0 : fsize_limit)}};
    runhooks::link_hooks(session);
    say("resumed " + std::to_string(session.raw_session().global_step()));
    while (!session.should_stop()) session.run();
    session.close();
    say("finished " + std::to_string(session.raw_session().global_step()));
    if (const std::string signal = runhooks::SignalStopHook::received_signal_name(); !signal.empty())
      say("signal " + signal);
    return 0;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 3;
  }
}
