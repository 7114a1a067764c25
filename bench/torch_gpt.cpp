// nanoGPT's character-level GPT (examples/torch/gpt.hpp, shakespeare.hpp) under runhooks, for
// `./dev bench-peers gpt` (tools/bench_peers/gpt_run.py; docs/performance.md, "nanoGPT"):
// issue 28's speed figures. Every loop trains the same model on one thread: nanoGPT's CPU
// configuration (block 64, batch 12, 4 layers, 4 heads, 128 embedding, no dropout), AdamW
// (betas 0.9, 0.99; weight decay 0.1 on the 2-D tensors only) at nanoGPT's learning rate
// (100 warm-up steps, cosine to 1e-4 at step 2000), gradients clipped to norm 1.0.
//
// Two modes.
//
// Worker (no arguments): tools/bench_peers/protocol.py's protocol on stdin and stdout (run.py
// interleaves it with the Python loops of gpt_peers.py), kind `gpt` (data=PATH of tiny
// Shakespeare), configurations:
//   libtorch-gpt         a hand-written loop: the rate of the step set in both parameter groups,
//                        a batch, loss, backward, clip_grad_norm_, AdamW's step, zero_grad
//   runhooks-gpt-bare    a MonitoredSession of a TorchStepBackend (the same step function, the
//                        clip as its option) with StopAtStepHook and LearningRateScheduleHook
//   runhooks-gpt-hooks   the same with the hooks a user attaches: StepCounterHook and
//                        SummarySaverHook (the loss) every summary_every steps into TensorBoard
//                        files, ProgressBarHook (the loss; a plain line every 30 s off a
//                        terminal), CheckpointSaverHook every save_every steps, asynchronous
//
// --measure: the figures a side-by-side table cannot resolve, the runhooks loop alone:
//   the hooks' share   the session's time outside the backend's step: the training thread's
//                      CPU time read before session.run(), by a hook whose before_run is the
//                      last one before the step, by a hook whose after_run is the first after
//                      it, and after run() returns; over the steps that do not save, per round
//                      the sum outside the step over the sum of the steps. The fetch of the loss on summary steps is
//                      the backend's (the step), the summary's write the hooks'.
//   the stall          on the steps that save (every --save-every), CheckpointSaverHook's
//                      after_run, wall time (a clock hook on each side of it): the snapshot of the model and
//                      the AdamW state into the host tensors the hook keeps; against it, after
//                      the next step, a memcpy of the same tensors' bytes into a buffer mapped
//                      before, and the same bytes through one Tensor::copy_ per tensor into host
//                      tensors made once (where the snapshot's time over the memcpy goes). Before
//                      each save, the previous one's background write is waited for, untimed.
//   The hooks are those of runhooks-gpt-hooks, summaries every 50 steps (train_gpt's --log-every).
//   bench_torch_gpt --measure --data PATH [--dir DIR] [--steps N] [--rounds N]
//                   [--save-every N] [--json PATH]
//
// --sync-check: what tools/gpu_check.sh checks on a CUDA device (and ./dev bench-peers gpt's
// users can run on the CPU): N steps (default 300) with the hooks above (summaries and the loss
// every 50 steps, a checkpoint every 100), counting on the training thread every conversion of a
// tensor to a number (aten::_local_scalar_dense: .item(), which waits for the device), through a
// thread-local RecordFunction callback. Checks: none on the steps where no hook fetched a value
// (the backend's item_calls() did not move), none but the fetched values' on the others, the
// loss fell, and the last checkpoint restores into a fresh backend with every weight equal. On
// CUDA, built with -DRUNHOOKS_BENCH_CUDA=1 and CUDA's headers (tools/gpu_check.sh does), it also
// counts every host-device synchronisation through c10's sync debug mode, those of drawing the
// batch (the data pipeline's) apart: none but those on the silent steps.
//   bench_torch_gpt --sync-check --data PATH [--device cpu|cuda] [--steps N] [--dir DIR]
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/core.hpp>
#include <runhooks/hooks/learning_rate_schedule_hook.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/log.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/torch/step_backend.hpp>

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>
#include <torch/version.h>

#ifndef RUNHOOKS_BENCH_CUDA
#define RUNHOOKS_BENCH_CUDA 0
#endif
#if RUNHOOKS_BENCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "../examples/torch/gpt.hpp"
#include "../examples/torch/shakespeare.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using runhooks::BatchLoss;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t seed = 1337;  // nanoGPT's
constexpr double clip = 1.0;

// nanoGPT's schedule through runhooks' own: peak 1e-3 after 100 steps, cosine to 1e-4 at 2000.
runhooks::WarmupCosineDecay schedule() {
  return runhooks::WarmupCosineDecay(
      {.peak_lr = 1e-3, .warmup_steps = 100, .decay_steps = 1900, .final_lr = 1e-4});
}

std::shared_ptr<torch::optim::AdamW> adamw(const gpt::GPT& model) {
  return std::make_shared<torch::optim::AdamW>(
      gpt::adamw_param_groups(*model, 0.1, torch::optim::AdamWOptions(1e-3).betas({0.9, 0.99})));
}

// The model, its optimizer and the training batches of one loop, built from the same seeds in
// every loop (and in gpt_peers.py's, from the same seed in Python's generator).
struct Training {
  explicit Training(const std::string& data, torch::Device on = torch::kCPU)
      : text(shakespeare::load(data)), model(gpt::Config{}, seed), optimizer(adamw(model)),
        batches(text.train, {.block_size = 64, .batch_size = 12}, on), device(on) {
    torch::manual_seed(seed);  // the batches' generator
  }
  shakespeare::Text text;
  gpt::GPT model;
  std::shared_ptr<torch::optim::AdamW> optimizer;
  shakespeare::Batches batches;
  torch::Device device;
};

// The user's step (Lightning's training_step): the batch's loss.
auto step_function(const std::shared_ptr<Training>& t) {
  return [t](gpt::GPT& model) -> torch::Tensor {
    auto [x, y] = t->batches.draw();
    return model->loss(x, y);
  };
}

template <class Step>
auto make_backend(const std::shared_ptr<Training>& t, Step step) {
  return runhooks::TorchStepBackend{
      t->model, t->optimizer, std::move(step),
      runhooks::TorchStepOptions{.clip_grad_norm = clip, .device = t->device}};
}

// ---- the protocol's loops ---------------------------------------------------------------------

struct Settings {
  std::string kind, data, dir;
  std::int64_t warmup = 0, save_every = 500, summary_every = 100, last_step = 0;
};

double now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }
double cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Loop {
  std::function<void(std::int64_t, std::vector<double>&)> run;
  std::function<void()> finish;
};

// The hand-written loop: what TorchStepBackend's step does, written out.
Loop hand_loop(const std::string& data) {
  auto t = std::make_shared<Training>(data);
  auto step = std::make_shared<std::int64_t>(0);
  const runhooks::WarmupCosineDecay rate = schedule();
  return {[t, step, rate](std::int64_t n, std::vector<double>& stamps) {
            torch::optim::AdamW& optimizer = *t->optimizer;
            for (std::int64_t i = 0; i < n; ++i) {
              const double lr = rate((*step)++);
              for (auto& group : optimizer.param_groups())
                static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
              auto [x, y] = t->batches.draw();
              torch::Tensor loss = t->model->loss(x, y);
              loss.backward();
              torch::nn::utils::clip_grad_norm_(t->model->parameters(), clip);
              optimizer.step();
              optimizer.zero_grad(/*set_to_none=*/true);
              stamps.push_back(now());
            }
          },
          [] {}};
}

template <class Backend, class... Hooks>
auto make_session(Backend backend, Hooks... hooks) {
  auto session = std::make_shared<runhooks::MonitoredSession<Backend, Hooks...>>(
      std::move(backend), std::move(hooks)...);
  runhooks::link_hooks(*session);  // the progress bar finds StopAtStepHook's last step
  return session;
}

template <class Session>
Loop session_loop(std::shared_ptr<Session> session) {
  return {[session](std::int64_t n, std::vector<double>& stamps) {
            for (std::int64_t i = 0; i < n; ++i) {
              if (session->should_stop()) throw std::runtime_error("the session stopped early");
              session->run();
              stamps.push_back(now());
            }
          },
          [session] { session->close(); }};
}

Loop setup(const std::string& config, const Settings& s) {
  if (s.kind != "gpt") throw std::invalid_argument("unknown kind '" + s.kind + "' (gpt only)");
  if (s.data.empty()) throw std::invalid_argument("kind gpt needs data=PATH (tiny Shakespeare)");
  if (config == "libtorch-gpt") return hand_loop(s.data);
  auto t = std::make_shared<Training>(s.data);
  if (config == "runhooks-gpt-bare")
    return session_loop(make_session(make_backend(t, step_function(t)),
                                     runhooks::StopAtStepHook({.last_step = s.last_step}),
                                     runhooks::LearningRateScheduleHook(schedule())));
  if (config == "runhooks-gpt-hooks")
    return session_loop(make_session(
        make_backend(t, step_function(t)), runhooks::StopAtStepHook({.last_step = s.last_step}),
        runhooks::LearningRateScheduleHook(schedule()),
        runhooks::StepCounterHook({.every_n_steps = s.summary_every},
                                  runhooks::SummaryOutput(s.dir)),
        runhooks::SummarySaverHook({.save_steps = s.summary_every}, s.dir,
                                   runhooks::scalars<BatchLoss>),
        runhooks::ProgressBarHook(runhooks::keys<BatchLoss>),
        runhooks::CheckpointSaverHook({.checkpoint_dir = s.dir, .save_steps = s.save_every})));
  throw std::invalid_argument("unknown config '" + config + "' for kind gpt");
}

std::int64_t count(const std::string& key, const std::string& value) {
  std::int64_t n = -1;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (error != std::errc{} || end != value.data() + value.size() || n < 0)
    throw std::invalid_argument(key + " must be a count, got '" + value + "'");
  return n;
}

Settings parse_settings(std::istringstream& words) {
  Settings s;
  words >> s.kind;
  for (std::string word; words >> word;) {
    const std::size_t eq = word.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("expected key=value, got '" + word + "'");
    const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "data") s.data = value;
    else if (key == "dir") s.dir = value;
    else if (key == "warmup") s.warmup = count(key, value);
    else if (key == "save_every") s.save_every = count(key, value);
    else if (key == "summary_every") s.summary_every = count(key, value);
    else if (key == "last_step") s.last_step = count(key, value);
    else throw std::invalid_argument("unknown setting '" + key + "'");
  }
  if (s.dir.empty()) throw std::invalid_argument("setup needs dir=PATH");
  if (s.save_every < 1 || s.summary_every < 1 || s.last_step < 1)
    throw std::invalid_argument("save_every, summary_every and last_step must be at least 1");
  return s;
}

std::string compiler() {
#if defined(__clang__)
  return "clang++-" + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__);
#elif defined(__GNUC__)
  return "g++-" + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__);
#else
  return "unknown";
#endif
}

int serve() {
  std::map<std::string, Loop> loops;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream words(line);
    std::string command, config;
    words >> command >> config;
    if (command == "quit") break;
    try {
      if (command == "version") {
        std::printf("version libtorch=%s compiler=%s\n", TORCH_VERSION, compiler().c_str());
      } else if (command == "setup") {
        const Settings s = parse_settings(words);
        loops.erase(config);
        Loop loop = setup(config, s);
        std::vector<double> stamps;
        loop.run(s.warmup, stamps);
        loops.emplace(config, std::move(loop));
        std::printf("ok\n");
      } else if (command == "run") {
        std::string steps;
        words >> steps;
        const std::int64_t n = count("N", steps);
        const auto found = loops.find(config);
        if (found == loops.end()) throw std::invalid_argument("no loop '" + config + "' set up");
        std::vector<double> stamps;
        stamps.reserve(static_cast<std::size_t>(n) + 1);
        const double cpu = cpu_now();
        stamps.push_back(now());
        found->second.run(n, stamps);
        const double cpu_secs = cpu_now() - cpu;
        std::printf("ran %.9f", stamps.back() - stamps.front());
        for (std::size_t i = 1; i < stamps.size(); ++i)
          std::printf(" %.9f", stamps[i] - stamps[i - 1]);
        std::printf(" background=0 cpu=%.9f\n", cpu_secs);
      } else if (command == "finish") {
        const auto it = loops.find(config);
        if (it == loops.end()) throw std::invalid_argument("no loop '" + config + "'");
        it->second.finish();
        loops.erase(it);
        std::printf("ok\n");
      } else {
        throw std::invalid_argument("unknown command '" + command + "'");
      }
    } catch (const std::exception& e) {
      std::string message = e.what();
      std::replace(message.begin(), message.end(), '\n', ' ');
      std::printf("error %s: %s\n", config.c_str(), message.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

// ---- --measure --------------------------------------------------------------------------------

// The training thread's CPU time, ms: the hooks' share is of CPU time, which a loaded machine
// does not inflate by leaving the thread waiting for a core (the step's wall time would).
double thread_cpu_ms() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

// Reads the clocks in its before_run (last hook: just before the step) or its after_run (first
// hook: just after the step, or around the saver): the steady clock and the thread's CPU time.
struct Stamp {
  Clock::time_point wall{};
  double cpu = 0.0;
  void take() {
    wall = Clock::now();
    cpu = thread_cpu_ms();
  }
};
struct StampBefore {
  Stamp* at;
  template <class Ctx>
  void before_run(Ctx&) {
    at->take();
  }
};
struct StampAfter {
  Stamp* at;
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {
    at->take();
  }
};

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// What a checkpoint of the backend holds, as tensors: the parameters and AdamW's two moments.
std::vector<torch::Tensor> state_tensors(const gpt::GPT& model, torch::optim::AdamW& optimizer) {
  std::vector<torch::Tensor> tensors;
  for (const torch::Tensor& p : model->parameters()) tensors.push_back(p);
  for (const torch::Tensor& b : model->buffers()) tensors.push_back(b);
  for (const auto& item : optimizer.state()) {
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*item.second);
    tensors.push_back(s.exp_avg());
    tensors.push_back(s.exp_avg_sq());
  }
  return tensors;
}

struct MeasureArgs {
  std::string data, dir, json;
  std::int64_t steps = 200, rounds = 5, save_every = 20, summary_every = 50;
};

int measure(const MeasureArgs& a) {
  fs::create_directories(a.dir);
  auto t = std::make_shared<Training>(a.data);
  // t0 before run(), t1 the last before_run, t2 the first after_run, t3 before the saver's
  // after_run, t4 after it, t5 when run() returned.
  Stamp t0, t1, t2, t3, t4, t5;
  auto session = make_session(
      make_backend(t, step_function(t)), StampAfter{&t2}, runhooks::StopAtStepHook({.num_steps = 1'000'000'000}),
      runhooks::LearningRateScheduleHook(schedule()),
      runhooks::StepCounterHook({.every_n_steps = a.summary_every}, runhooks::SummaryOutput(a.dir)),
      runhooks::SummarySaverHook({.save_steps = a.summary_every}, a.dir,
                                 runhooks::scalars<BatchLoss>),
      runhooks::ProgressBarHook(runhooks::keys<BatchLoss>), StampAfter{&t3},
      runhooks::CheckpointSaverHook({.checkpoint_dir = (fs::path(a.dir) / "checkpoints").string(),
                                     .save_steps = a.save_every,
                                     .max_to_keep = 2}),
      StampAfter{&t4}, StampBefore{&t1});
  auto& saver = session->template hook<7>();
  const auto settle = [&] {
    while ((saver.save_in_flight() && !saver.save_in_flight_finished()) ||
           saver.manager().deleting())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  };
  for (int i = 0; i < 20; ++i) session->run();  // warm-up: the first save, summaries, allocations
  settle();

  std::vector<double> shares, hooks_us, step_ms, snapshot_ms, memcpy_ms, copy_ms;
  std::vector<double> snapshot_cpu_ms, memcpy_cpu_ms;  // the same on the thread's CPU clock
  std::size_t bytes = 0;
  std::vector<char> floor_buffer;
  std::vector<torch::Tensor> copies;  // host tensors like the snapshot's, made once
  for (std::int64_t round = 0; round < a.rounds; ++round) {
    double outside = 0.0, inside = 0.0, worst = 0.0;
    std::vector<double> silent_after, silent_after_cpu;  // the saver's after_run on silent steps
    std::vector<double> round_snapshots, round_snapshots_cpu;
    bool copy_next = false;
    for (std::int64_t i = 0; i < a.steps; ++i) {
      settle();
      const std::int64_t step = session->raw_session().global_step();
      const bool saves = (step + 1) % a.save_every == 0;
      t0.take();
      session->run();
      t5.take();
      if (saves) {
        round_snapshots.push_back(ms(t4.wall - t3.wall));
        round_snapshots_cpu.push_back(t4.cpu - t3.cpu);
        copy_next = true;
        continue;
      }
      const double hooks = (t1.cpu - t0.cpu) + (t5.cpu - t2.cpu);
      outside += hooks;
      inside += t2.cpu - t1.cpu;
      worst = std::max(worst, hooks);
      silent_after.push_back(ms(t4.wall - t3.wall));
      silent_after_cpu.push_back(t4.cpu - t3.cpu);
      hooks_us.push_back(1e3 * hooks);
      step_ms.push_back(t2.cpu - t1.cpu);
      if (copy_next) {  // the floors, after a step as the snapshot was
        copy_next = false;
        torch::NoGradGuard no_grad;  // as the snapshot: no autograd record of the copies
        const std::vector<torch::Tensor> tensors = state_tensors(t->model, *t->optimizer);
        if (floor_buffer.empty()) {
          for (const torch::Tensor& x : tensors) {
            bytes += x.nbytes();
            copies.push_back(torch::empty_like(x));
            copies.back().copy_(x);  // mapped and touched before the timed copies
          }
          floor_buffer.assign(bytes, 1);  // mapped before the copies
        }
        auto start = Clock::now();
        const double start_cpu = thread_cpu_ms();
        std::size_t at = 0;
        for (const torch::Tensor& x : tensors) {
          std::memcpy(floor_buffer.data() + at, x.data_ptr(), x.nbytes());
          at += x.nbytes();
        }
        asm volatile("" : : "r"(floor_buffer.data()) : "memory");  // the copy is kept
        memcpy_ms.push_back(ms(Clock::now() - start));
        memcpy_cpu_ms.push_back(thread_cpu_ms() - start_cpu);
        // The same bytes through Tensor::copy_, one call per tensor (what a snapshot into kept
        // host tensors does, less its bookkeeping).
        start = Clock::now();
        for (std::size_t k = 0; k < tensors.size(); ++k) copies[k].copy_(tensors[k]);
        copy_ms.push_back(ms(Clock::now() - start));
      }
    }
    // The saving step's extra time in the saver: its after_run less a silent step's.
    const double silent = median(silent_after);
    for (double s : round_snapshots) snapshot_ms.push_back(s - silent);
    const double silent_cpu = median(silent_after_cpu);
    for (double s : round_snapshots_cpu) snapshot_cpu_ms.push_back(s - silent_cpu);
    shares.push_back(outside / inside);
    std::fprintf(stderr,
                 "round %lld: hooks %.2f us/step in the mean (%.5f %% of the step), worst %.3f ms, "
                 "step %.2f ms, snapshot %.3f ms\n",
                 static_cast<long long>(round + 1),
                 1e3 * outside / static_cast<double>(silent_after.size()), 100.0 * outside / inside,
                 worst, median(step_ms), median(round_snapshots) - silent);
  }
  settle();
  session->close();
  const double snapshot = median(snapshot_ms), floor = median(memcpy_ms);
  std::ostringstream json;
  json << "{\"steps\": " << a.steps << ", \"rounds\": " << a.rounds
       << ", \"summary_every\": " << a.summary_every
       << ", \"hooks\": {\"hooks_us\": " << median(hooks_us) << ", \"step_ms\": " << median(step_ms)
       << ", \"share\": " << median(shares) << "}, \"stall\": {\"save_every\": " << a.save_every
       << ", \"bytes\": " << bytes << ", \"snapshot_ms\": " << snapshot
       << ", \"memcpy_ms\": " << floor << ", \"copy_ms\": " << median(copy_ms)
       << ", \"ratio\": " << (floor > 0 ? snapshot / floor : 0.0)
       << ", \"snapshot_cpu_ms\": " << median(snapshot_cpu_ms)
       << ", \"memcpy_cpu_ms\": " << median(memcpy_cpu_ms)
       << ", \"ratio_cpu\": " << median(snapshot_cpu_ms) / median(memcpy_cpu_ms)
       << ", \"saves\": " << snapshot_ms.size() << "}}\n";
  std::printf("%s", json.str().c_str());
  if (!a.json.empty()) {
    std::ofstream out(a.json);
    out << json.str();
    if (!out) throw std::runtime_error("cannot write " + a.json);
  }
  return 0;
}


// ---- --sync-check -----------------------------------------------------------------------------

// Tensor-to-number conversions on the training thread: every .item() (and every bool or number
// read of a tensor) is aten::_local_scalar_dense, which waits for the device. Counted through a
// thread-local RecordFunction callback (the profiler's mechanism), installed only in this mode.
std::int64_t scalar_reads = 0;

std::unique_ptr<at::ObserverContext> count_scalar_read(const at::RecordFunction& fn) {
  if (std::string_view(fn.name()) == "aten::_local_scalar_dense") ++scalar_reads;
  return nullptr;
}

// Host-device synchronisations on the training thread, on CUDA: c10's sync debug mode (what
// torch.cuda.set_sync_debug_mode("warn") sets) warns on every synchronizing operation (a blocking
// copy, .item(), a stream or device synchronize); this handler counts those warnings. Built with
// -DRUNHOOKS_BENCH_CUDA=1 and CUDA's headers (tools/gpu_check.sh does), else not counted.
std::int64_t device_syncs = 0;
#if RUNHOOKS_BENCH_CUDA
struct SyncWarningCounter : c10::WarningHandler {
  c10::WarningHandler* previous = c10::WarningUtils::get_warning_handler();
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing CUDA operation") != std::string::npos)
      ++device_syncs;
    else
      previous->process(warning);
  }
};
#endif

// Fetches the loss of the first run and of every `every`-th, and keeps it, to see it fall.
struct LossLog {
  std::int64_t every;
  std::vector<std::pair<std::int64_t, float>>* losses;
  std::int64_t runs = 0;
  auto before_run(auto&) {
    return runhooks::SessionRunArgs{runhooks::fetch<BatchLoss>(++runs % every == 0 || runs == 1)};
  }
  void after_run(auto&, const auto& values) {
    if (const auto& loss = values[BatchLoss{}]) losses->emplace_back(runs, *loss);
  }
};

struct SyncArgs {
  std::string data, dir, device = "cpu";
  std::int64_t steps = 300, summary_every = 50, save_every = 100;
};

// Trains with the hooks a user attaches and counts, per step, the conversions on the training
// thread (all of them) and the backend's own (item_calls(): the fetches the hooks asked for). A
// step where the backend converted nothing is a silent step: it must have no conversion at all;
// a step that fetched must have exactly the backend's. Then restores the last checkpoint into a
// fresh backend and compares its weights. Prints what it checked; exit 1 if anything failed.
int sync_check(const SyncArgs& a) {
  const torch::Device device(a.device);
  fs::create_directories(a.dir);
  const fs::path checkpoints = fs::path(a.dir) / "checkpoints";
  auto t = std::make_shared<Training>(a.data, device);
  std::vector<std::pair<std::int64_t, float>> losses;
  // The step function of the other modes, with the synchronisations of drawing the batch (the
  // data pipeline's, not the hooks') counted apart.
  std::int64_t data_syncs = 0;
  auto step = [t, &data_syncs](gpt::GPT& model) -> torch::Tensor {
    const std::int64_t before = device_syncs;
    auto [x, y] = t->batches.draw();
    data_syncs += device_syncs - before;
    return model->loss(x, y);
  };
  auto session = make_session(
      make_backend(t, step), runhooks::StopAtStepHook({.last_step = a.steps}),
      runhooks::LearningRateScheduleHook(schedule()),
      runhooks::StepCounterHook({.every_n_steps = a.summary_every}, runhooks::SummaryOutput(a.dir)),
      runhooks::SummarySaverHook({.save_steps = a.summary_every}, a.dir,
                                 runhooks::scalars<BatchLoss>),
      runhooks::ProgressBarHook(runhooks::keys<BatchLoss>),
      LossLog{.every = a.summary_every, .losses = &losses},
      runhooks::CheckpointSaverHook({.checkpoint_dir = checkpoints.string(),
                                     .save_steps = a.save_every}));
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&count_scalar_read).scopes({at::RecordScope::FUNCTION}));
  const bool count_syncs = RUNHOOKS_BENCH_CUDA && device.is_cuda();
#if RUNHOOKS_BENCH_CUDA
  SyncWarningCounter counter;
  std::optional<c10::WarningUtils::WarningHandlerGuard> guard;
  if (count_syncs) {
    guard.emplace(&counter);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
#endif
  bool counter_sees = true;  // the counter checked on a deliberate synchronisation
  if (count_syncs) {
    const std::int64_t before = device_syncs;
    (void)torch::ones({1}, torch::TensorOptions().device(device)).item<float>();
    counter_sees = device_syncs > before;
    scalar_reads = 0;
  }
  std::int64_t silent = 0, fetching = 0, silent_reads = 0, extra_reads = 0, fetched = 0;
  std::int64_t silent_syncs = 0, silent_data_syncs = 0;
  std::vector<std::int64_t> bad_steps;
  const auto started = Clock::now();
  while (!session->should_stop()) {
    const std::int64_t reads = scalar_reads, items = session->raw_session().item_calls();
    const std::int64_t syncs = device_syncs, data = data_syncs;
    session->run();
    const std::int64_t step_reads = scalar_reads - reads;
    const std::int64_t step_items = session->raw_session().item_calls() - items;
    if (step_items == 0) {
      ++silent;
      silent_reads += step_reads;
      silent_syncs += device_syncs - syncs;
      silent_data_syncs += data_syncs - data;
    } else {
      ++fetching;
      fetched += step_items;
      extra_reads += step_reads - step_items;
    }
    if (step_reads != step_items && bad_steps.size() < 10)
      bad_steps.push_back(session->raw_session().global_step());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  at::removeCallback(handle);
#if RUNHOOKS_BENCH_CUDA
  if (count_syncs) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  guard.reset();
#endif
  session->close();  // the last save, waited for

  bool ok = true;
  const auto check = [&](bool passed, const std::string& what) {
    std::printf("%s %s\n", passed ? "ok  " : "FAIL", what.c_str());
    ok = ok && passed;
  };
  std::printf("bench_torch_gpt --sync-check: %lld steps on %s in %.1f s (%.1f ms/step)\n",
              static_cast<long long>(silent + fetching), device.str().c_str(), seconds,
              1e3 * seconds / static_cast<double>(std::max<std::int64_t>(1, silent + fetching)));
  check(silent_reads == 0, "silent steps (no hook fetched): " + std::to_string(silent) + ", with " +
                               std::to_string(silent_reads) + " tensor-to-number conversions (0 expected)");
  check(fetching > 0 && extra_reads == 0,
        "steps with fetches: " + std::to_string(fetching) + ", " + std::to_string(fetched) +
            " values converted, " + std::to_string(extra_reads) + " other conversions (0 expected)");
  if (count_syncs) {
    check(counter_sees, "the synchronisation counter sees a deliberate .item() on " + device.str());
    check(silent_syncs == silent_data_syncs,
          "host-device synchronisations on the silent steps (c10's sync debug mode): " +
              std::to_string(silent_syncs) + ", of which " + std::to_string(silent_data_syncs) +
              " in drawing the batch (the data pipeline's: shakespeare::Batches::draw's blocking "
              "copy); " + std::to_string(silent_syncs - silent_data_syncs) +
              " in the backend and the hooks (0 expected)");
  } else if (device.is_cuda()) {
    std::printf("note host-device synchronisations not counted: built without "
                "-DRUNHOOKS_BENCH_CUDA=1 (CUDA's headers)\n");
  }
  if (!bad_steps.empty()) {
    std::string steps;
    for (std::int64_t s : bad_steps) steps += " " + std::to_string(s);
    std::printf("     steps with unexpected conversions:%s\n", steps.c_str());
  }
  const bool fell = losses.size() >= 2 && losses.back().second < losses.front().second - 1.0f;
  check(fell, "the loss fell: " +
                  (losses.empty() ? std::string("no loss fetched")
                                  : std::to_string(losses.front().second) + " at step " +
                                        std::to_string(losses.front().first) + ", " +
                                        std::to_string(losses.back().second) + " at step " +
                                        std::to_string(losses.back().first)) +
                  " (a fall of more than 1 expected)");
  // The last checkpoint, restored into a fresh backend: the weights of the trained one.
  const fs::path prefix = checkpoints / ("model.ckpt-" + std::to_string(a.steps));
  bool restored = false;
  std::string why;
  try {
    auto fresh = std::make_shared<Training>(a.data, device);
    auto backend = make_backend(fresh, step_function(fresh));
    backend.restore(prefix);
    const auto trained = t->model->parameters(), loaded = fresh->model->parameters();
    restored = backend.global_step() == a.steps && trained.size() == loaded.size();
    for (std::size_t i = 0; restored && i < trained.size(); ++i)
      restored = torch::equal(trained[i], loaded[i]);
    if (!restored) why = " (the weights or the step differ)";
  } catch (const std::exception& e) {
    why = std::string(": ") + e.what();
  }
  check(restored, "checkpoint " + prefix.string() + " written and restored: step " +
                      std::to_string(a.steps) + ", every weight equal" + why);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Log lines (checkpoint saves, step rates, the progress bar) go to stderr, the driver's log.
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  torch::set_num_threads(1);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return serve();
  try {
    if (args[0] == "--sync-check") {
      SyncArgs a;
      a.dir = (fs::temp_directory_path() / "runhooks-gpt-sync-check").string();
      for (std::size_t i = 1; i < args.size(); i += 2) {
        if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + " needs a value");
        const std::string& key = args[i];
        const std::string& value = args[i + 1];
        if (key == "--data") a.data = value;
        else if (key == "--dir") a.dir = value;
        else if (key == "--device") a.device = value;
        else if (key == "--steps") a.steps = count(key, value);
        else throw std::invalid_argument("unknown argument '" + key + "'");
      }
      if (a.data.empty()) throw std::invalid_argument("--sync-check needs --data PATH");
      if (a.device != "cpu" && a.device != "cuda")
        throw std::invalid_argument("--device must be cpu or cuda, got '" + a.device + "'");
      if (a.steps < a.save_every || a.steps % a.save_every != 0)
        throw std::invalid_argument("--steps must be a positive multiple of " +
                                    std::to_string(a.save_every) + ", got " + std::to_string(a.steps));
      if (fs::exists(a.dir) && !fs::is_empty(a.dir))
        throw std::invalid_argument("--dir " + a.dir + " must be empty or absent");
      return sync_check(a);
    }
    if (args[0] != "--measure")
      throw std::invalid_argument("usage: bench_torch_gpt (a worker: commands on stdin) | "
                                  "bench_torch_gpt --measure --data PATH [--dir DIR] [--steps N] "
                                  "[--rounds N] [--save-every N] [--json PATH] | "
                                  "bench_torch_gpt --sync-check --data PATH [--device cpu|cuda] "
                                  "[--steps N] [--dir DIR]");
    MeasureArgs a;
    a.dir = (fs::temp_directory_path() / "runhooks-bench-gpt").string();
    for (std::size_t i = 1; i < args.size(); i += 2) {
      if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + " needs a value");
      const std::string& key = args[i];
      const std::string& value = args[i + 1];
      if (key == "--data") a.data = value;
      else if (key == "--dir") a.dir = value;
      else if (key == "--json") a.json = value;
      else if (key == "--steps") a.steps = count(key, value);
      else if (key == "--rounds") a.rounds = count(key, value);
      else if (key == "--save-every") a.save_every = count(key, value);
      else throw std::invalid_argument("unknown argument '" + key + "'");
    }
    if (a.data.empty()) throw std::invalid_argument("--measure needs --data PATH");
    if (a.steps < 2 || a.rounds < 1 || a.save_every < 2)
      throw std::invalid_argument("--steps and --save-every must be at least 2, --rounds 1");
    return measure(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_torch_gpt: %s\n", e.what());
    return 2;
  }
}
