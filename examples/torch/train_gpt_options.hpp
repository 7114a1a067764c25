// train_gpt's command line: its options with nanoGPT's CPU configuration as the defaults, parsed
// strictly (an unknown option, a missing value or a bad one exits 2 with one line naming the
// option and the value, before anything is made or read).
#pragma once

#include "gpt.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <system_error>

namespace train_gpt {

struct Options {
  std::string data;            // empty: the default path, ../shared/data/tinyshakespeare.txt
  std::string checkpoint_dir;  // empty: a new run directory next to the executable
  std::string logdir;          // empty: checkpoint_dir
  std::int64_t steps = 2000;
  std::string device = "cpu";
  std::int64_t threads = 1;
  std::uint64_t seed = 1337;  // nanoGPT's
  gpt::Config model{};        // --layers --heads --embd --block (and --dropout)
  std::int64_t batch = 12;    // the global batch, whatever the number of ranks
  std::int64_t eval_every = 250;
  std::int64_t eval_batches = 20;
  std::int64_t final_eval_batches = 200;
  double lr = 1e-3;
  double min_lr = 1e-4;
  std::int64_t warmup_steps = 100;
  std::int64_t lr_decay_steps = 2000;  // the step at which the cosine reaches min_lr
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.99;
  double grad_clip = 1.0;  // 0: none
  std::int64_t log_every = 50;
  std::int64_t save_steps = 250;
  std::int64_t keep_best = 1;
  std::int64_t sample_chars = 200;
  double peak_flops = 312e12;  // nanoGPT's estimate_mfu: an A100's bfloat16 peak
  std::string engine;          // "" (one process) or "c10d" (under torchrun)
  std::int64_t timeout_secs = 60;
};

constexpr const char* usage_text =
    "usage: train_gpt [--data FILE] [--steps N] [--device cpu|cuda] [--checkpoint-dir DIR]\n"
    "                 [--logdir DIR] [--threads N] [--seed S] [--layers N] [--heads N] [--embd N]\n"
    "                 [--block N] [--batch N] [--dropout X] [--eval-every N] [--eval-batches N]\n"
    "                 [--final-eval-batches N] [--lr X] [--min-lr X] [--warmup-steps N]\n"
    "                 [--lr-decay-steps N] [--weight-decay X] [--beta1 X] [--beta2 X]\n"
    "                 [--grad-clip X] [--log-every N] [--save-steps N] [--keep-best N]\n"
    "                 [--sample-chars N] [--peak-flops X] [--engine c10d] [--timeout-secs N]\n"
    "  Trains nanoGPT's character-level GPT on tiny Shakespeare under a MonitoredSession; the\n"
    "  defaults are nanoGPT's CPU configuration. N and S are positive integers (--warmup-steps,\n"
    "  --sample-chars: at least 0), X numbers.\n"
    "  --data FILE          tiny Shakespeare (default ../shared/data/tinyshakespeare.txt beside\n"
    "                       the repository; karpathy/char-rnn's data/tinyshakespeare/input.txt)\n"
    "  --steps N            the last global step (default 2000)\n"
    "  --device D           cpu (default) or cuda (when libtorch has CUDA)\n"
    "  --checkpoint-dir DIR checkpoints (every --save-steps steps and the --keep-best best by\n"
    "                       validation loss, in DIR/best); a run on a DIR that holds one resumes\n"
    "                       from it (default: a new directory train_gpt-runs/run-YYYYMMDD-HHMMSS\n"
    "                       next to this executable, kept)\n"
    "  --logdir DIR         TensorBoard files: DIR (training) and DIR/eval (default: the\n"
    "                       checkpoint directory)\n"
    "  --threads N          torch's intra-op threads (default 1)\n"
    "  --seed S             the initial weights and the batches (default 1337)\n"
    "  --layers N --heads N --embd N --block N\n"
    "                       the model (default 4, 4, 128, 64; --embd a multiple of --heads)\n"
    "  --batch N            rows of the global batch, split over the ranks (default 12)\n"
    "  --dropout X          in [0, 1) (default 0)\n"
    "  --eval-every N       the losses on both splits every N steps (default 250)\n"
    "  --eval-batches N     ... on N batches of each (default 20)\n"
    "  --final-eval-batches N  the validation loss printed at the end, on N batches (default 200)\n"
    "  --lr X --min-lr X    AdamW's peak and final learning rate (default 1e-3, 1e-4)\n"
    "  --warmup-steps N     linear warmup (default 100), then a cosine decay to --min-lr ...\n"
    "  --lr-decay-steps N   ... reached at step N (default 2000), held after\n"
    "  --weight-decay X     on the 2-D weights only (default 0.1)\n"
    "  --beta1 X --beta2 X  AdamW's betas (default 0.9, 0.99)\n"
    "  --grad-clip X        the gradient's norm clipped at X (default 1; 0: no clipping)\n"
    "  --log-every N        the loss, learning rate and throughput every N steps (default 50)\n"
    "  --save-steps N       a checkpoint every N steps (default 250)\n"
    "  --keep-best N        best checkpoints kept (default 1)\n"
    "  --sample-chars N     characters sampled at the end (default 200)\n"
    "  --peak-flops X       the device's peak FLOP/s for MFU (default 312e12, an A100's bfloat16\n"
    "                       peak, as nanoGPT's estimate_mfu)\n"
    "  --engine c10d        one rank of a data-parallel job under torchrun (Gloo)\n"
    "  --timeout-secs N     c10d: how long a rank waits for a peer (default 60)\n"
    "  The last lines printed are the validation loss, the sample and `tensorboard --logdir DIR`.\n";

// Called with the line usage_error prints before it exits, when set (under torchrun: into its
// error file, so that torchrun's report shows it).
inline void (*on_usage_error)(const std::string& line) = nullptr;

[[noreturn]] inline void usage_error(const std::string& message) {
  const std::string line = "train_gpt: " + message + "; see train_gpt --help";
  std::fprintf(stderr, "%s\n", line.c_str());
  if (on_usage_error != nullptr) on_usage_error(line);
  std::exit(2);
}

inline std::int64_t integer(std::string_view name, std::string_view text, std::int64_t min) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || value < min)
    usage_error(std::string(name) + (min == 0 ? " must be an integer at least 0" : " must be a positive integer") +
                ", got '" + std::string(text) + "'");
  return value;
}

// A finite number in [min, max] (strict_min: above min), or usage_error naming `what`.
inline double number(std::string_view name, std::string_view text, double min, double max,
                     bool strict_min, const char* what) {
  const std::string s(text);
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(value) || value < min || value > max ||
      (strict_min && value == min))
    usage_error(std::string(name) + " must be " + what + ", got '" + s + "'");
  return value;
}

// A number as %g writes it (0.001, 1e-05).
inline std::string shortest(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", x);
  return buffer;
}

inline Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(usage_text, stdout);
      std::exit(0);
    }
    if (arg.substr(0, 2) != "--") usage_error("unknown argument '" + std::string(arg) + "'");
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    const auto count = [&](std::int64_t min = 1) { return integer(arg, value(), min); };
    if (arg == "--data") o.data = value();
    else if (arg == "--checkpoint-dir") o.checkpoint_dir = value();
    else if (arg == "--logdir") o.logdir = value();
    else if (arg == "--steps") o.steps = count();
    else if (arg == "--device") {
      const std::string_view d = value();
      if (d != "cpu" && d != "cuda") usage_error("--device must be cpu or cuda, got '" + std::string(d) + "'");
      o.device = d;
    } else if (arg == "--threads") o.threads = count();
    else if (arg == "--seed") o.seed = static_cast<std::uint64_t>(count());
    else if (arg == "--layers") o.model.n_layer = count();
    else if (arg == "--heads") o.model.n_head = count();
    else if (arg == "--embd") o.model.n_embd = count();
    else if (arg == "--block") o.model.block_size = count();
    else if (arg == "--batch") o.batch = count();
    else if (arg == "--dropout") o.model.dropout = number(arg, value(), 0.0, 1.0, false, "a number in [0, 1)");
    else if (arg == "--eval-every") o.eval_every = count();
    else if (arg == "--eval-batches") o.eval_batches = count();
    else if (arg == "--final-eval-batches") o.final_eval_batches = count();
    else if (arg == "--lr") o.lr = number(arg, value(), 0.0, 1e3, true, "a number greater than 0");
    else if (arg == "--min-lr") o.min_lr = number(arg, value(), 0.0, 1e3, false, "a number at least 0");
    else if (arg == "--warmup-steps") o.warmup_steps = count(0);
    else if (arg == "--lr-decay-steps") o.lr_decay_steps = count();
    else if (arg == "--weight-decay") o.weight_decay = number(arg, value(), 0.0, 1e3, false, "a number at least 0");
    else if (arg == "--beta1") o.beta1 = number(arg, value(), 0.0, 1.0, false, "a number in [0, 1)");
    else if (arg == "--beta2") o.beta2 = number(arg, value(), 0.0, 1.0, false, "a number in [0, 1)");
    else if (arg == "--grad-clip") o.grad_clip = number(arg, value(), 0.0, 1e9, false, "a number at least 0 (0: no clipping)");
    else if (arg == "--log-every") o.log_every = count();
    else if (arg == "--save-steps") o.save_steps = count();
    else if (arg == "--keep-best") o.keep_best = count();
    else if (arg == "--sample-chars") o.sample_chars = count(0);
    else if (arg == "--peak-flops") o.peak_flops = number(arg, value(), 0.0, 1e30, true, "a number of FLOP/s greater than 0");
    else if (arg == "--engine") {
      const std::string_view e = value();
      if (e != "c10d") usage_error("--engine must be c10d, got '" + std::string(e) + "'");
      o.engine = e;
    } else if (arg == "--timeout-secs") o.timeout_secs = count();
    else usage_error("unknown argument '" + std::string(arg) + "'");
  }
  // What no single option can say alone.
  if (o.model.dropout == 1.0) usage_error("--dropout must be a number in [0, 1), got '1'");
  if (o.beta1 == 1.0 || o.beta2 == 1.0)
    usage_error(std::string(o.beta1 == 1.0 ? "--beta1" : "--beta2") + " must be a number in [0, 1), got '1'");
  if (o.model.n_embd % o.model.n_head != 0)
    usage_error("--embd must be a multiple of --heads (" + std::to_string(o.model.n_head) +
                "), got '" + std::to_string(o.model.n_embd) + "'");
  if (o.min_lr > o.lr)
    usage_error("--min-lr must be at most --lr (" + shortest(o.lr) + "), got '" + shortest(o.min_lr) + "'");
  if (o.lr_decay_steps <= o.warmup_steps)
    usage_error("--lr-decay-steps must be greater than --warmup-steps (" +
                std::to_string(o.warmup_steps) + "), got '" + std::to_string(o.lr_decay_steps) + "'");
  return o;
}

}  // namespace train_gpt
