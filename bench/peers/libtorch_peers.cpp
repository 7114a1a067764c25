// The libtorch side of `./dev bench-peers` (tools/bench_peers/run.py, docs/performance.md):
// a worker process that holds several training loops, each set up once and then run a few steps
// at a time when the driver says so, so that the driver can interleave them with the Python
// frameworks' loops in rounds. Every loop trains with libtorch on one thread:
//   libtorch          a hand-written loop: the backend's step, nothing else
//   runhooks-bare     a MonitoredSession with StopAtStepHook only
//   runhooks-hooks    StopAtStepHook, StepCounterHook (every summary_every steps, to TensorBoard),
//                     CheckpointSaverHook (every save_every steps, asynchronous),
//                     SummarySaverHook (the loss every summary_every steps), ProgressBarHook
//                     (the loss, on stderr: not a terminal, so a plain line every 30 s)
// and, for the checkpoint stall of a 64 MiB state (kind `stall`):
//   libtorch-save     the hand-written loop calling save(): the model, the optimizer and the step
//                     as a torch archive (torch::serialize::OutputArchive::save_to), every
//                     save_every steps, over one file, no fsync
//   runhooks-async    CheckpointSaverHook (save_every steps, max_to_keep 1): the step takes
//                     TorchBackend's snapshot(); a background thread writes it as the same
//                     archive, fsyncs, commits
//   runhooks-sync     the same with async_save = false: all of it in the step
// All of them use runhooks::TorchBackend for the step (forward, cross-entropy, backward, SGD with
// momentum), so the work per step is the same code everywhere.
//
// Kinds (the model and data a loop trains):
//   digits   the MLP (64, 64, 10) on the 8x8 digits, batches of 32 (data=PATH: the uncompressed
//            CSV of scikit-learn's digits.csv.gz; every fifth row is held out, as in
//            examples/torch/train_digits.cpp)
//   trivial  a Linear(1, 2) on 64 random rows, batches of 1: a step that does almost nothing,
//            so the loop's own cost shows
//   stall    the trivial model plus a 64 MiB buffer (a [4096, 4096] float tensor, saved with the
//            model): a checkpoint of 64 MiB and a step that costs little
//
// Protocol: one command per line on stdin, one reply per line on stdout (errors: `error TEXT`).
//   version                         `version libtorch=V compiler=C`
//   setup CONFIG KIND key=value...  builds the loop and runs `warmup` steps untimed; `ok`
//            keys: data, dir (an empty scratch directory), warmup, save_every, summary_every,
//            last_step (StopAtStepHook's; the driver's total)
//   run CONFIG N                    runs N steps; `ran T d1 ... dN background=B cpu=C`:
//                                   seconds in all, each step's (steady clock), how long the
//                                   background save the steps left took to finish afterwards
//                                   (waited for, untimed; 0 without one), and the process's CPU
//                                   seconds over the N steps (every thread)
//   finish CONFIG                   closes the loop (a session's end(): its final save); `ok`
//   quit
//
//   bench_peers_libtorch            (run by tools/bench_peers/run.py; not a benchmark() item)
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/core.hpp>
#include <runhooks/hooks/progress_bar_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/link_hooks.hpp>
#include <runhooks/log.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/torch/tensor_batches.hpp>
#include <runhooks/torch/torch_backend.hpp>

#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
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

// ---- models and data --------------------------------------------------------------------------

// The trivial model plus 64 MiB that every checkpoint holds and no step touches (a buffer: saved
// with the parameters, never updated by the optimizer).
struct BigStateImpl : torch::nn::Module {
  BigStateImpl()
      : fc(register_module("fc", torch::nn::Linear(1, 2))),
        state(register_buffer("state", torch::rand({4096, 4096}))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x); }
  torch::nn::Linear fc;
  torch::Tensor state;
};
TORCH_MODULE(BigState);

using SequentialBackend = runhooks::TorchBackend<torch::nn::Sequential, torch::optim::SGD>;
using BigStateBackend = runhooks::TorchBackend<BigState, torch::optim::SGD>;

torch::optim::SGDOptions sgd() { return torch::optim::SGDOptions(0.05).momentum(0.9); }

// The training rows of the digits: every row of the CSV but every fifth (train_digits' split),
// pixels scaled to 0..1.
runhooks::TensorBatches digits_batches(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::vector<float> pixels;
  std::vector<std::int64_t> labels;
  std::string line;
  std::int64_t row = 0;
  while (std::getline(file, line)) {
    if (line.empty()) continue;
    std::vector<double> values;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) values.push_back(std::stod(cell));
    if (values.size() != 65)
      throw std::runtime_error(path + ": line " + std::to_string(row + 1) + ": expected 65 values");
    if (row++ % 5 == 4) continue;  // held out
    for (std::size_t j = 0; j < 64; ++j) pixels.push_back(static_cast<float>(values[j] / 16.0));
    labels.push_back(static_cast<std::int64_t>(values[64]));
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  if (n == 0) throw std::runtime_error(path + ": no rows");
  return runhooks::TensorBatches(torch::tensor(pixels).reshape({n, 64}),
                                 torch::tensor(labels, torch::kLong), 32, 1);
}

// 64 rows of one feature, labels 0 or 1, batches of one.
runhooks::TensorBatches trivial_batches() {
  torch::manual_seed(2);
  return runhooks::TensorBatches(torch::rand({64, 1}), torch::randint(0, 2, {64}, torch::kLong),
                                 /*batch_size=*/1, /*seed=*/1);
}

SequentialBackend digits_backend(const std::string& data) {
  runhooks::TensorBatches batches = digits_batches(data);
  torch::manual_seed(1);
  return SequentialBackend(torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                                                 torch::nn::Linear(64, 10)),
                           std::move(batches), sgd());
}
SequentialBackend trivial_backend() {
  runhooks::TensorBatches batches = trivial_batches();
  torch::manual_seed(1);
  return SequentialBackend(torch::nn::Sequential(torch::nn::Linear(1, 2)), std::move(batches),
                           sgd());
}
BigStateBackend stall_backend() {
  runhooks::TensorBatches batches = trivial_batches();
  torch::manual_seed(1);
  return BigStateBackend(BigState(), std::move(batches), sgd());
}

// ---- the loops --------------------------------------------------------------------------------

struct Settings {
  std::string kind, data, dir;
  std::int64_t warmup = 0, save_every = 500, summary_every = 100, last_step = 0;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// A loop set up by `setup`: run(n, stamps) runs n steps and appends the time after each;
// settle() waits, untimed, for work a step left to a background thread (an asynchronous save),
// so that it does not run while the driver times the next loop, and returns the seconds waited.
struct Loop {
  std::function<void(std::int64_t, std::vector<double>&)> run;
  std::function<void()> finish;
  std::function<double()> settle = [] { return 0.0; };
};

template <class Session>
void run_session(Session& session, std::int64_t n, std::vector<double>& stamps) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (session.should_stop()) throw std::runtime_error("the session stopped early");
    session.run();
    stamps.push_back(now());
  }
}

template <class Backend, class... Hooks>
std::shared_ptr<runhooks::MonitoredSession<Backend, Hooks...>> make_session(Backend backend,
                                                                           Hooks... hooks) {
  auto session = std::make_shared<runhooks::MonitoredSession<Backend, Hooks...>>(std::move(backend),
                                                                                 std::move(hooks)...);
  runhooks::link_hooks(*session);  // the progress bar finds StopAtStepHook's last step
  return session;
}

template <class Session>
Loop session_loop(std::shared_ptr<Session> session) {
  return {[session](std::int64_t n, std::vector<double>& stamps) {
            run_session(*session, n, stamps);
          },
          [session] { session->close(); }};
}
template <class Backend, class... Hooks>
Loop session_loop(Backend backend, Hooks... hooks) {
  return session_loop(make_session(std::move(backend), std::move(hooks)...));
}

// The hand-written loop; with save_every > 0, backend.save() after every save_every-th step.
template <class Backend>
Loop hand_loop(Backend backend, std::int64_t save_every, const std::string& dir) {
  auto b = std::make_shared<Backend>(std::move(backend));
  const std::string prefix = (fs::path(dir) / "model").string();
  return {[b, save_every, prefix](std::int64_t n, std::vector<double>& stamps) {
            for (std::int64_t i = 0; i < n; ++i) {
              b->run();
              if (save_every > 0 && b->global_step() % save_every == 0) b->save(prefix);
              stamps.push_back(now());
            }
          },
          [] {}};
}

template <class Backend>
Loop make_loop(const std::string& config, Backend backend, const Settings& s) {
  const std::string& dir = s.dir;
  if (config == "libtorch") return hand_loop(std::move(backend), 0, dir);
  if (config == "runhooks-bare")
    return session_loop(std::move(backend), runhooks::StopAtStepHook({.last_step = s.last_step}));
  if (config == "runhooks-hooks")
    return session_loop(
        std::move(backend), runhooks::StopAtStepHook({.last_step = s.last_step}),
        runhooks::StepCounterHook({.every_n_steps = s.summary_every}, runhooks::SummaryOutput(dir)),
        runhooks::CheckpointSaverHook({.checkpoint_dir = dir, .save_steps = s.save_every}),
        runhooks::SummarySaverHook({.save_steps = s.summary_every}, dir,
                                   runhooks::scalars<BatchLoss>),
        runhooks::ProgressBarHook(runhooks::keys<BatchLoss>));
  throw std::invalid_argument("unknown config '" + config + "' for kind " + s.kind);
}

Loop make_stall_loop(const std::string& config, const Settings& s) {
  if (config == "libtorch-save") return hand_loop(stall_backend(), s.save_every, s.dir);
  if (config != "runhooks-async" && config != "runhooks-sync")
    throw std::invalid_argument("unknown config '" + config + "' for kind stall");
  auto session = make_session(stall_backend(), runhooks::StopAtStepHook({.last_step = s.last_step}),
                              runhooks::CheckpointSaverHook({.checkpoint_dir = s.dir,
                                                             .save_steps = s.save_every,
                                                             .max_to_keep = 1,
                                                             .async_save = config == "runhooks-async"}));
  Loop loop = session_loop(session);
  // The background write of the save the round's last step started; the next step collects it.
  loop.settle = [session] {
    auto& saver = session->template hook<1>();
    if (!saver.save_in_flight()) return 0.0;
    const double start = now();
    while (saver.save_in_flight() && !saver.save_in_flight_finished())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    return now() - start;
  };
  return loop;
}

Loop setup(const std::string& config, const Settings& s) {
  if (s.kind == "digits") {
    if (s.data.empty()) throw std::invalid_argument("kind digits needs data=PATH");
    return make_loop(config, digits_backend(s.data), s);
  }
  if (s.kind == "trivial") return make_loop(config, trivial_backend(), s);
  if (s.kind == "stall") return make_stall_loop(config, s);
  throw std::invalid_argument("unknown kind '" + s.kind + "'");
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

// The compiler, for the driver's notes: "g++-12.2.0" or "clang++-14.0.6".
std::string compiler() {
#if defined(__clang__)
  return "clang++-" + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__) + "." +
         std::to_string(__clang_patchlevel__);
#elif defined(__GNUC__)
  return "g++-" + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
         std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

}  // namespace

int main() {
  // Log lines (checkpoint saves, step rates) go to stderr, the driver's log file.
  runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  torch::set_num_threads(1);
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
        Loop& loop = found->second;
        std::vector<double> stamps;
        stamps.reserve(static_cast<std::size_t>(n) + 1);
        const double cpu = cpu_now();
        stamps.push_back(now());
        loop.run(n, stamps);
        const double cpu_secs = cpu_now() - cpu;
        const double waited = loop.settle();
        std::printf("ran %.9f", stamps.back() - stamps.front());
        for (std::size_t i = 1; i < stamps.size(); ++i)
          std::printf(" %.9f", stamps[i] - stamps[i - 1]);
        std::printf(" background=%.9f cpu=%.9f\n", waited, cpu_secs);
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
      for (char& c : message)
        if (c == '\n') c = ' ';
      std::printf("error %s: %s\n", config.c_str(), message.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
