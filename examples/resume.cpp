// Training that survives: checkpoints, a restore on start, a clean stop on Ctrl-C or SIGTERM.
//
//   resume --checkpoint-dir DIR --steps N [--save-steps K] [--step-ms M]
//
// Trains the demo's logistic regression (logistic_regression.hpp) up to global step N, saving a
// checkpoint every K steps (default 100) into DIR, the last 5 kept. A rerun on the same DIR
// resumes from the latest checkpoint and says so. The first Ctrl-C (SIGINT) or SIGTERM stops
// training after the step in progress: every hook's end() runs, the checkpoint hook saves that
// last step, and the program exits 0; a second one terminates at once (the checkpoints on disk
// stay consistent either way). --step-ms slows each step down, to try it by hand:
//
//   build/examples/resume --checkpoint-dir /tmp/ckpt --steps 100000 --step-ms 1   # Ctrl-C it
//   build/examples/resume --checkpoint-dir /tmp/ckpt --steps 100000 --step-ms 1   # resumes
//
// The test examples/check_resume.py runs it, interrupts it and reruns it, and checks every claim.
#include <runhooks/runhooks.hpp>

#include "logistic_regression.hpp"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <string_view>
#include <thread>

namespace {

struct Options {
  std::string checkpoint_dir;
  std::int64_t steps = -1;
  std::int64_t save_steps = 100;
  std::int64_t step_ms = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "resume: %s\nusage: resume --checkpoint-dir DIR --steps N [--save-steps K] "
               "[--step-ms M]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) usage("missing value after " + std::string(arg));
    const char* value = argv[++i];
    try {
      if (arg == "--checkpoint-dir") options.checkpoint_dir = value;
      else if (arg == "--steps") options.steps = std::stoll(value);
      else if (arg == "--save-steps") options.save_steps = std::stoll(value);
      else if (arg == "--step-ms") options.step_ms = std::stoll(value);
      else usage("unknown option " + std::string(arg));
    } catch (const std::logic_error&) {
      usage("not a number: " + std::string(arg) + " " + value);
    }
  }
  if (options.checkpoint_dir.empty() || options.steps < 0)
    usage("--checkpoint-dir and --steps are required");
  return options;
}

demo::LogisticRegression make_model() {
  const demo::Weights true_weights = {2.0, -3.0, 1.5, 0.0, -1.0, 0.5, -0.5};
  std::mt19937 rng(2024);
  return demo::LogisticRegression(demo::make_data(true_weights, 4000, rng), /*batch_size=*/16,
                                  /*seed=*/7);
}

// Sleeps before every step when asked to, so that a person can press Ctrl-C mid-run.
struct SlowSteps {
  std::int64_t ms;
  void before_run(auto&) const {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  // The library's own lines (saves, restores, the signal) go to stderr; ours to stdout.
  try {
    runhooks::MonitoredSession session{
        // Restores the latest checkpoint of the directory on start and on every recovery.
        runhooks::ChiefSessionCreator(make_model, {.checkpoint_dir = options.checkpoint_dir}),
        runhooks::StopAtStepHook({.last_step = options.steps}),
        runhooks::SignalStopHook{},
        runhooks::CheckpointSaverHook(
            {.checkpoint_dir = options.checkpoint_dir, .save_steps = options.save_steps}),
        SlowSteps{options.step_ms},
    };
    const std::int64_t start = session.raw_session().global_step();
    if (start == 0)
      std::printf("starting from step 0\n");
    else
      std::printf("resumed from step %lld\n", static_cast<long long>(start));
    std::fflush(stdout);

    while (!session.should_stop()) session.run();
    session.close();  // every end(): the checkpoint hook saves the last step if it was not saved

    const std::int64_t last = session.raw_session().global_step();
    if (const std::string signal = runhooks::SignalStopHook::received_signal_name(); !signal.empty())
      std::printf("stopped by %s at step %lld; checkpoint %s/model.ckpt-%lld saved\n",
                  signal.c_str(), static_cast<long long>(last),
                  options.checkpoint_dir.c_str(), static_cast<long long>(last));
    else
      std::printf("finished at step %lld; accuracy %.3f\n", static_cast<long long>(last),
                  demo::accuracy(session.raw_session().weights(), session.raw_session().data()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "resume: %s\n", e.what());
    return 1;
  }
}
