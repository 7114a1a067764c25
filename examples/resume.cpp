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
//   ./dev demo && ninja -C build/demo examples/resume   # ./dev demo configures build/demo
//   build/demo/examples/resume --checkpoint-dir /tmp/ckpt --steps 100000 --step-ms 1   # Ctrl-C it
//   build/demo/examples/resume --checkpoint-dir /tmp/ckpt --steps 100000 --step-ms 1   # resumes
//
// The test examples/check_resume.py runs it, interrupts it and reruns it, and checks every claim.
#include <runhooks/runhooks.hpp>

#include "logistic_regression.hpp"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

namespace {

struct Options {
  std::string checkpoint_dir;
  std::optional<std::int64_t> steps;
  std::int64_t save_steps = 100;
  std::int64_t step_ms = 0;
};

constexpr const char* usage_line =
    "usage: resume --checkpoint-dir DIR --steps N [--save-steps K] [--step-ms M]\n"
    "  trains up to global step N, saving a checkpoint every K steps (default 100) into DIR, and\n"
    "  resumes from DIR's latest checkpoint; --step-ms sleeps M ms per step (default 0).\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "resume: %s\n%s", why.c_str(), usage_line);
  std::exit(2);
}

// The whole value as an integer of at least `least`, or a usage error naming the option.
std::int64_t integer(std::string_view option, std::string_view value, std::int64_t least) {
  std::int64_t result = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), result);
  if (error != std::errc{} || end != value.data() + value.size())
    usage(std::string(option) + ": '" + std::string(value) + "' is not a whole number");
  if (result < least)
    usage(std::string(option) + " must be at least " + std::to_string(least) + ", got " +
          std::string(value));
  return result;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_line, stdout);
      std::exit(0);
    }
    if (arg != "--checkpoint-dir" && arg != "--steps" && arg != "--save-steps" &&
        arg != "--step-ms")
      usage("unknown option " + std::string(arg));
    if (i + 1 >= argc || std::string_view(argv[i + 1]).starts_with("--"))
      usage(std::string(arg) + " needs a value");
    const std::string_view value = argv[++i];
    if (arg == "--checkpoint-dir") options.checkpoint_dir = value;
    else if (arg == "--steps") options.steps = integer(arg, value, 0);
    else if (arg == "--save-steps") options.save_steps = integer(arg, value, 1);
    else options.step_ms = integer(arg, value, 0);
  }
  if (options.checkpoint_dir.empty()) usage("--checkpoint-dir is required");
  if (!options.steps) usage("--steps is required");
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
        runhooks::StopAtStepHook({.last_step = *options.steps}),
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
    if (start >= *options.steps) {
      // StopAtStepHook, as TensorFlow's, would still run one step before it stops.
      std::printf("already at step %lld, at or past --steps %lld: nothing to train\n",
                  static_cast<long long>(start), static_cast<long long>(*options.steps));
      return 0;
    }

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
