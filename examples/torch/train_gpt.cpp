// nanoGPT's character-level Shakespeare model trained in C++ under a MonitoredSession: the GPT of
// gpt.hpp on tiny Shakespeare (shakespeare.hpp), with nanoGPT's CPU configuration as the
// default. `./dev demo-gpt` builds this and runs the full 2,000 steps; `./dev demo-gpt -- --ranks
// 2` runs it on two ranks under torchrun.
//
//   train_gpt [--data FILE] [--steps N] [--checkpoint-dir DIR] ...     (train_gpt --help)
//   torchrun --standalone --nproc-per-node 2 --no-python train_gpt --engine c10d
//       --checkpoint-dir DIR ...                                        (data-parallel)
//
// The backend, runhooks::TorchStepBackend, runs the user's step (a batch, the model's loss),
// clips the gradient's norm at --grad-clip and takes AdamW's step; the hooks add the rest:
//   StopAtStepHook            ends training at global step --steps
//   SignalStopHook            Ctrl-C or SIGTERM ends training after the current step (every
//                             end() runs, the last checkpoint's included)
//   LearningRateScheduleHook  nanoGPT's schedule: linear warmup over --warmup-steps to --lr,
//                             cosine decay to --min-lr at --lr-decay-steps, held after
//   EvaluationHook            nanoGPT's estimate_loss: the mean loss on --eval-batches random
//                             batches of each split every --eval-every steps (at the start and
//                             the end too), logged and written to DIR/eval, TensorBoard's second
//                             run line; it produces TrainLoss and ValLoss for the hooks after it
//   BestCheckpointHook        keeps the --keep-best checkpoints of lowest validation loss
//   StepCounterHook, SummarySaverHook, LearningRateMonitorHook, ThroughputMonitorHook
//                             steps/s, the batch loss, the rate, tokens/s and MFU (FLOPs per
//                             token as nanoGPT's estimate_mfu) every --log-every steps, logged and
//                             in TensorBoard
//   ProgressBarHook           a progress bar on a terminal
//   CheckpointSaverHook       a checkpoint every --save-steps steps and at the end, written on a
//                             background thread
// On several ranks (--engine c10d under torchrun) the global batch of --batch rows is split over
// them, gradients are averaged (GradientAllreduce), every rank starts from the chief's state
// (ChiefStateHook), stops at the same step (StopVoteHook), and only the chief evaluates, logs,
// writes and saves (ChiefOnly).
//
// Exact resume: a run on a --checkpoint-dir that holds a checkpoint restores it: the model,
// AdamW's state, the step and torch's generator, from which the batches are drawn; an
// evaluation's batches come from a generator seeded with the seed and the step. So a run killed
// and resumed ends with the parameters, optimizer state and evaluation losses of an uninterrupted
// run, byte for byte (tests/torch/check_train_gpt.py).
//
// The last lines printed: `validation loss: X (N batches at step S)`, the sample, and
// `tensorboard --logdir DIR`.
#include <runhooks/checkpoint/best_checkpoint_hook.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/distributed/chief_only.hpp>
#include <runhooks/distributed/chief_state_hook.hpp>
#include <runhooks/distributed/stop_vote_hook.hpp>
#include <runhooks/hooks/evaluation_hook.hpp>
#include <runhooks/hooks/learning_rate_monitor_hook.hpp>
#include <runhooks/hooks/learning_rate_schedule_hook.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/stop_at_step_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/hooks/throughput_monitor_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/session/run_loop.hpp>
#include <runhooks/torch/gradient_sync.hpp>
#include <runhooks/training_session/chief_only.hpp>  // Conditional
#include <runhooks/torch/step_backend.hpp>
#if RUNHOOKS_EXAMPLE_C10D
#include <runhooks/torch/distributed/c10d_environment.hpp>
#include <runhooks/torch/distributed/c10d_gradient_allreduce.hpp>
#include <runhooks/torch/distributed/gradient_allreduce.hpp>
#endif

#include "../run_directory.hpp"
#include "gpt.hpp"
#include "shakespeare.hpp"
#include "train_gpt_options.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

#ifndef RUNHOOKS_SOURCE_ROOT
#error "RUNHOOKS_SOURCE_ROOT: the repository's path, for the default --data (examples/torch/meson.build)"
#endif

namespace {

// What the EvaluationHook produces: nanoGPT's estimate_loss() of each split. The validation
// loss is named "loss": in DIR/eval it is TensorBoard's second line on the chart of the training
// batch loss.
struct TrainLoss : runhooks::Key<float> {
  static constexpr std::string_view name = "train_loss";
};
struct ValLoss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};

// SplitMix64: the seed of an evaluation's generator from the run's seed, a purpose and the step,
// so that an evaluation draws the same batches whenever and wherever it runs.
std::uint64_t mix(std::uint64_t seed, std::uint64_t purpose, std::uint64_t step) {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (1 + purpose * 0x100000001b3ull + step);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr std::uint64_t evaluation_purpose = 1, final_purpose = 2, sample_purpose = 3;

// The mean loss of `count` batches of `batches` drawn from `generator`, summed in double on the
// device and converted once (one synchronization per evaluation on a GPU).
double mean_loss(gpt::GPT& model, const shakespeare::Batches& batches, std::int64_t count,
                 at::Generator& generator) {
  torch::Tensor sum;
  for (std::int64_t i = 0; i < count; ++i) {
    auto [x, y] = batches.draw(generator);
    const torch::Tensor loss = model->loss(x, y).to(torch::kDouble);
    sum = i == 0 ? loss : sum + loss;
  }
  return sum.item<double>() / static_cast<double>(count);
}

// FNV-1a over the bytes of each tensor, in order (on the host).
struct Fnv {
  std::uint64_t hash = 1469598103934665603ull;
  void add(const torch::Tensor& t) {
    const torch::Tensor bytes = t.detach().to(torch::kCPU).contiguous();
    const auto* data = static_cast<const unsigned char*>(bytes.const_data_ptr());
    for (std::size_t i = 0; i < bytes.nbytes(); ++i) {
      hash ^= data[i];
      hash *= 1099511628211ull;
    }
  }
};

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);  // one write per line: ranks share the terminal
  std::fflush(stdout);
}

std::string format(const char* f, double x) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, f, x);
  return buffer;
}

// ThroughputMonitorHook's rates as TensorBoard scalars, and one log line per report: the global
// tokens/s and the MFU (nanoGPT's "mfu" of its iteration lines).
struct ThroughputOutput {
  runhooks::SummaryOutput summary;
  double tokens_per_sec = 0.0;
  void record(std::string_view tag, double value, std::int64_t step) {
    summary.record(tag, value, step);
    if (tag == "items_per_sec") tokens_per_sec = value;
    if (tag == "device/mfu")
      runhooks::log(runhooks::Severity::info,
                    "step " + std::to_string(step) + ": " + format("%.0f", tokens_per_sec) +
                        " tokens/s, MFU " + format("%.4f", 100.0 * value) + " %");
  }
};

// What every rank shares: the options, the data and the device.
struct Setup {
  train_gpt::Options options;
  gpt::Config config;
  shakespeare::Text text;
  torch::Device device;
  std::string dir, logdir;
};

// The run on one rank of `size` (1: one process). Sync is the gradient synchronization
// (runhooks::NoGradientSync alone); collective() gives a runhooks::Collective, called twice on
// every rank when size > 1 (ChiefStateHook's, then StopVoteHook's).
template <class Sync, class MakeCollective>
int train(const Setup& setup, int rank, int size, std::optional<Sync>& sync,
          MakeCollective&& collective) {
  constexpr bool distributed = !std::is_same_v<Sync, runhooks::NoGradientSync>;
  const train_gpt::Options& options = setup.options;
  const gpt::Config& config = setup.config;
  const shakespeare::Text& text = setup.text;
  const torch::Device device = setup.device;
  const bool chief = rank == 0;
  if (options.batch % size != 0)
    throw std::invalid_argument("--batch " + std::to_string(options.batch) +
                                " does not split over " + std::to_string(size) + " ranks");
  const shakespeare::Batches train_batches(
      text.train, {.block_size = config.block_size, .batch_size = options.batch, .rank = rank,
                   .num_replicas = size}, device);
  const shakespeare::Batches train_eval(text.train, {.block_size = config.block_size, .batch_size = options.batch}, device);
  const shakespeare::Batches val_batches(text.val, {.block_size = config.block_size, .batch_size = options.batch}, device);

  const gpt::GPT probe(config, options.seed);
  if (chief)
    say("training a GPT of " + std::to_string(probe->num_params()) + " parameters on " +
        std::to_string(text.train.size(0)) + " characters of tiny Shakespeare (" +
        std::to_string(text.val.size(0)) + " held out): " + std::to_string(options.steps) +
        " steps of " + std::to_string(options.batch) + " x " + std::to_string(config.block_size) +
        " characters" +
        (size > 1 ? ", " + std::to_string(train_batches.local_batch_size()) + " rows on each of " +
                        std::to_string(size) + " ranks"
                  : std::string()));

  // The model and its optimizer, fresh: at the start and on a recovery (the creator then restores
  // the latest checkpoint into them). The batches come from torch's default generator, whose
  // state the checkpoint holds (and ChiefStateHook gives every rank).
  torch::manual_seed(options.seed);
  const auto step = [&](gpt::GPT& model) {
    auto [x, y] = train_batches.draw();
    return model->loss(x, y);
  };
  const auto make_backend = [&] {
    gpt::GPT model(config, options.seed);
    auto optimizer = std::make_shared<torch::optim::AdamW>(
        gpt::adamw_param_groups(*model, options.weight_decay),
        torch::optim::AdamWOptions(options.lr).betas({options.beta1, options.beta2}));
    const runhooks::TorchStepOptions step_options{
        .clip_grad_norm = options.grad_clip > 0.0 ? std::optional<double>(options.grad_clip) : std::nullopt,
        .device = device};
    if constexpr (distributed) {
      if (!sync) throw std::logic_error("train_gpt: the backend was made twice on one rank");
      Sync taken = std::move(*sync);
      sync.reset();
      return runhooks::TorchStepBackend(std::move(model), std::move(optimizer), step,
                                        std::move(taken), step_options);
    } else {
      return runhooks::TorchStepBackend(std::move(model), std::move(optimizer), step, step_options);
    }
  };
  using Backend = decltype(make_backend());

  // nanoGPT's estimate_loss(): both splits, in evaluation mode without gradients.
  const auto evaluator = [&](Backend& backend) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(
        mix(options.seed, evaluation_purpose, static_cast<std::uint64_t>(backend.global_step())));
    return backend.evaluate([&](gpt::GPT& model) {
      const double train = mean_loss(model, train_eval, options.eval_batches, generator);
      const double val = mean_loss(model, val_batches, options.eval_batches, generator);
      return runhooks::KeyValues<TrainLoss, ValLoss>(static_cast<float>(train), static_cast<float>(val));
    });
  };

  const std::string& dir = setup.dir;
  const std::string& logdir = setup.logdir;
  // The chief's hooks, skipped elsewhere (ChiefOnly). The saver is in runhooks::Conditional
  // instead, off on the other ranks, which lets link_hooks reach it: BestCheckpointHook finds
  // the saver, on or off, through it (ChiefOnly passes no link on).
  const auto chief_only = [&](auto hook) { return runhooks::ChiefOnly(std::move(hook), chief); };
  using Saver = runhooks::CheckpointSaverHook<>;
  runhooks::Conditional<Saver> saver(
      chief ? std::optional<Saver>(std::in_place, runhooks::CheckpointSaverOptions{
                                                      .checkpoint_dir = dir, .save_steps = options.save_steps})
            : std::nullopt);
  const double local_rows = static_cast<double>(train_batches.local_batch_size());
  auto hooks = std::make_tuple(
      runhooks::StopAtStepHook({.last_step = options.steps}),
      runhooks::LearningRateScheduleHook(runhooks::WarmupCosineDecay(
          {.peak_lr = options.lr, .warmup_steps = options.warmup_steps,
           .decay_steps = options.lr_decay_steps - options.warmup_steps, .final_lr = options.min_lr})),
      // On every rank, so that BestCheckpointHook receives what it produces (a wrapper would hide
      // it); the others evaluate alongside the chief, which they would otherwise wait for at
      // the next step's allreduce, and neither log nor write.
      runhooks::EvaluationHook(runhooks::keys<TrainLoss, ValLoss>, evaluator,
                               {.every_n_steps = options.eval_every,
                                .output_dir = chief ? std::string_view(logdir) : std::string_view(),
                                .log = chief}),
      // The --keep-best checkpoints of lowest validation loss, saved by the saver (off on the
      // other ranks, where this hook then does nothing).
      runhooks::BestCheckpointHook<ValLoss>({.save_top_k = options.keep_best}),
      chief_only(runhooks::StepCounterHook({.every_n_steps = options.log_every},
                                           runhooks::SummaryOutput(logdir, /*log_line=*/false))),
      chief_only(runhooks::SummarySaverHook({.save_steps = options.log_every}, logdir,
                                            runhooks::scalars<runhooks::BatchLoss>)),
      chief_only(runhooks::LearningRateMonitorHook({.every_n_steps = options.log_every},
                                                   runhooks::SummaryOutput(logdir, false))),
      chief_only(runhooks::ThroughputMonitorHook(
          runhooks::ThroughputOptions{
              .every_n_steps = options.log_every,
              .samples_per_step = local_rows,
              .items_per_step = local_rows * static_cast<double>(config.block_size),
              .flops_per_sample = probe->flops_per_token() * static_cast<double>(config.block_size),
              .available_flops = options.peak_flops,
              .world_size = size},
          ThroughputOutput{runhooks::SummaryOutput(logdir, false)})),
      chief_only(runhooks::ProgressBarHook(runhooks::keys<runhooks::BatchLoss>, {.total = options.steps})),
      std::move(saver));

  const auto run = [&](auto creator, auto&&... all) {
    runhooks::MonitoredSession session{std::move(creator), std::move(all)...};
    runhooks::link_hooks(session);  // BestCheckpointHook finds the saver
    const auto start = std::chrono::steady_clock::now();
    const std::int64_t first_step = session.raw_session().global_step();
    runhooks::run_loop(session);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Backend& backend = session.raw_session();
    const std::int64_t last_step = backend.global_step(), ran = last_step - first_step;
    if (chief)
      say("trained to step " + std::to_string(last_step) + " in " + format("%.1f", secs) + " s (" +
          format("%.1f", ran > 0 ? 1e3 * secs / static_cast<double>(ran) : 0.0) + " ms/step)");

    // What a resumed run must end with, byte for byte, on every rank.
    Fnv parameters, optimizer_state;
    for (const torch::Tensor& p : backend.model()->parameters()) parameters.add(p);
    torch::optim::AdamW& optimizer = backend.optimizer();
    for (const torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
      for (const torch::Tensor& p : group.params()) {
        const auto found = optimizer.state().find(p.unsafeGetTensorImpl());
        if (found == optimizer.state().end()) continue;  // no step yet
        const auto& state = static_cast<const torch::optim::AdamWParamState&>(*found->second);
        optimizer_state.add(torch::tensor(state.step(), torch::kLong));
        optimizer_state.add(state.exp_avg());
        optimizer_state.add(state.exp_avg_sq());
      }
    say((size > 1 ? "rank " + std::to_string(rank) + " " : std::string()) + "parameters hash: " +
        std::to_string(parameters.hash) + ", optimizer state hash: " +
        std::to_string(optimizer_state.hash));
    if (!chief) return;

    at::Generator final_generator =
        at::make_generator<at::CPUGeneratorImpl>(mix(options.seed, final_purpose, 0));
    const double val_loss = backend.evaluate([&](gpt::GPT& model) {
      return mean_loss(model, val_batches, options.final_eval_batches, final_generator);
    });
    at::Generator sample_generator =
        at::make_generator<at::CPUGeneratorImpl>(mix(options.seed, sample_purpose, 0));
    const std::string sample = backend.evaluate([&](gpt::GPT& model) {
      const torch::Tensor newline = text.vocabulary.encode("\n").view({1, 1}).to(device);
      return text.vocabulary.decode(
          model->generate(newline, options.sample_chars, sample_generator).narrow(1, 1, options.sample_chars));
    });
    say("validation loss: " + format("%.4f", val_loss) + " (" +
        std::to_string(options.final_eval_batches) + " batches of " +
        std::to_string(options.batch) + " x " + std::to_string(config.block_size) + " at step " +
        std::to_string(last_step) + ")");
    say("sample (" + std::to_string(options.sample_chars) + " characters):\n" + sample);
    say("TensorBoard shows the losses, the learning rate and the throughput (pip install tensorboard):");
    say(example_runs::tensorboard_command(logdir));
  };

  if constexpr (distributed) {
    // The chief restores the latest checkpoint of the directory; the others take its state.
    // Never a recovery: a rank re-created alone would leave the others' collectives.
    auto creator = runhooks::ChiefSessionCreator(
        make_backend, {.checkpoint_dir = chief ? std::string_view(dir) : std::string_view()},
        runhooks::NoRecovery{});
    auto state = collective();
    auto vote = collective();
    std::apply(
        [&](auto&... common) {
          run(std::move(creator), runhooks::ChiefStateHook(std::move(state)), std::move(common)...,
              runhooks::Voted(runhooks::SignalStopHook()), runhooks::StopVoteHook(std::move(vote)));
        },
        hooks);
  } else {
    std::apply(
        [&](auto&... common) {
          run(runhooks::ChiefSessionCreator(make_backend, {.checkpoint_dir = dir}),
              std::move(common)..., runhooks::SignalStopHook());
        },
        hooks);
  }
  return 0;
}

#if RUNHOOKS_EXAMPLE_C10D
// torchrun's LOCAL_RANK (C10dEnvironment has checked it), 0 without.
c10::DeviceIndex local_rank() {
  const char* text = std::getenv("LOCAL_RANK");
  return static_cast<c10::DeviceIndex>(text == nullptr ? 0 : std::atoi(text));
}

void set_rank_log_sink(int rank) {
  static int log_rank = 0;
  log_rank = rank;
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    say("[rank " + std::to_string(log_rank) + "] " + std::string(line));
  });
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  train_gpt::Options options = train_gpt::parse(argc, argv);
  const char* world = std::getenv("WORLD_SIZE");
  const bool under_torchrun = world != nullptr && std::string_view(world) != "1";
#if RUNHOOKS_EXAMPLE_C10D
  // A bad option under torchrun: its failure report shows the line.
  if (options.engine == "c10d")
    train_gpt::on_usage_error = [](const std::string& line) { runhooks::write_torchrun_error_file(line); };
#else
  if (!options.engine.empty())
    train_gpt::usage_error("--engine c10d: this build has no c10d (configure with -Dtorch_distributed=enabled)");
#endif
  if (under_torchrun && options.engine.empty())
    train_gpt::usage_error("started as one of WORLD_SIZE=" + std::string(world) +
                           " ranks (torchrun?) without --engine c10d");
  if (!options.engine.empty() && options.checkpoint_dir.empty())
    train_gpt::usage_error("--engine c10d needs --checkpoint-dir: every rank must name the same one");

  const std::filesystem::path default_data =
      std::filesystem::path(RUNHOOKS_SOURCE_ROOT) / ".." / "shared" / "data" / "tinyshakespeare.txt";
  if (options.data.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(default_data, ec))
      train_gpt::usage_error("no --data given, and the default " +
                             default_data.lexically_normal().string() + " is not there; " +
                             std::string(shakespeare::source) + ": fetch it and pass --data FILE");
    options.data = default_data.lexically_normal().string();
  }
  if (options.device == "cuda" && !torch::cuda::is_available())
    train_gpt::usage_error("--device cuda: this libtorch has no CUDA, or sees no CUDA device");

  // The default directory is made before the data is read, so that its failure is reported
  // first; an explicit one is ChiefSessionCreator's to make.
  const std::string dir = options.checkpoint_dir.empty() ? example_runs::new_run_directory().string()
                                                         : options.checkpoint_dir;
  Setup setup{options, options.model, shakespeare::load(options.data),
              options.device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU),
              dir, options.logdir.empty() ? dir : options.logdir};
  setup.config.vocab_size = setup.text.vocabulary.size();
  torch::set_num_threads(static_cast<int>(options.threads));

#if RUNHOOKS_EXAMPLE_C10D
  if (options.engine == "c10d") {
    return runhooks::c10d_run_or_abort([&] {
      runhooks::C10dEnvironment env({.timeout_secs = static_cast<double>(options.timeout_secs)});
      set_rank_log_sink(env.rank());
      // One GPU per rank of this machine, as torchrun's LOCAL_RANK numbers them.
      if (setup.device.is_cuda()) setup.device = torch::Device(torch::kCUDA, local_rank());
      if (env.rank() == 0)
        say("checkpoints and TensorBoard files: " + example_runs::display_path(setup.dir).string());
      using Sync = runhooks::GradientAllreduce<runhooks::C10dAllreduceSum>;
      std::optional<Sync> sync(std::in_place, runhooks::C10dAllreduceSum(env.process_group()));
      return train(setup, env.rank(), env.size(), sync, [&] { return env.collective(); });
    });
  }
#endif
  say("checkpoints: " + example_runs::display_path(setup.dir).string() +
      (setup.logdir == setup.dir ? " (and TensorBoard files)"
                                 : "; TensorBoard files: " + example_runs::display_path(setup.logdir).string()));
  static const bool terminal = isatty(STDOUT_FILENO) == 1;
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::printf("%s%.*s\n", terminal ? "\r\x1b[K" : "", static_cast<int>(line.size()), line.data());
    std::fflush(stdout);
  });
  std::optional<runhooks::NoGradientSync> none;
  return train(setup, 0, 1, none, [] { return 0; });
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_gpt: %s\n", e.what());
  return 1;
}
