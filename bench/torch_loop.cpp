// The hooks' cost inside a real libtorch training loop: the same loop (a small MLP, one SGD step
// per run on a batch of 32, torch::set_num_threads(1)) driven three ways, side by side in one
// run, with the same per-step logic in each:
//   hand-written     stop test, step counter, silent checkpoint test, summaries every 100 steps,
//                    all written inline in the loop
//   runhooks         MonitoredSession with StopAtStepHook + StepCounterHook + a silent
//                    CheckpointSaverHook + SummarySaverHook (loss and accuracy every 100 steps)
//   virtual hooks    std::vector<std::unique_ptr<Hook>> with virtual hook points (TensorFlow's
//                    shape), holding the same hooks
// and, for what the lazy fetches avoid, runhooks once more with a hook that converts the loss
// with .item() on every step (a running mean of the loss, as Python loops often keep).
//
// Every configuration trains its own copy of the same model on the same batches: the work is
// identical, and the program checks that all copies end with the same weights, bit for bit.
// Configurations are interleaved in rounds (the order rotates every round), so that the load of
// a shared machine spreads over all of them; each round gives every configuration's process CPU
// time per step, and its ratio to the hand-written loop of the same round. Reported: the median
// over rounds and the quartiles. The same loops over an empty backend (a step that only counts)
// measure the hooks' own per-step cost without libtorch's noise, and two microbenchmarks the
// price of one .item().
//
// The hand-written and virtual loops write their summaries as SummarySaverHook does (TensorFlow's
// steps: the first run, then every 100 steps; one event with both scalars, through the same
// EventFileSummaryWriter), and their step rate as StepCounterHook's SummaryOutput does, so that
// the file I/O is the same everywhere. The checkpoint saver never triggers in the measured steps
// (save_steps far beyond them): its per-step cost is a compare, as with any save_steps.
//
//   bench_torch_loop [--rounds N] [--steps N] [--null-steps N] [--json PATH] [--smoke]
// --smoke: 2 rounds of 20 steps, for the test suite: checks, no meaningful numbers.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/core.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/torch/tensor_batches.hpp>
#include <runhooks/torch/torch_backend.hpp>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using runhooks::BatchAccuracy;
using runhooks::BatchLoss;

constexpr std::int64_t summary_every = 100;  // summaries (loss, accuracy) and step rate
constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max() / 4;

// ---- backends -------------------------------------------------------------------------------

using Model = torch::nn::Sequential;
using TorchBackend = runhooks::TorchBackend<Model, torch::optim::SGD>;

struct Data {
  torch::Tensor inputs, targets;
};
const Data& data() {
  static const Data d = [] {
    torch::manual_seed(5);
    return Data{torch::randn({2048, 64}), torch::randint(0, 10, {2048}, torch::kLong)};
  }();
  return d;
}

TorchBackend make_torch_backend() {
  const Data& d = data();  // first: making the data reseeds torch's generator
  torch::manual_seed(1);   // the same initial weights in every configuration
  return TorchBackend(Model(torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10)),
                      runhooks::TensorBatches(d.inputs, d.targets, 32, 7),
                      torch::optim::SGDOptions(0.05).momentum(0.9));
}

inline volatile std::int64_t step_sink = 0;

// The same interface with an empty step: what is left is the loop and its hooks.
struct NullBackend {
  std::int64_t step = 0;
  void run() noexcept { step_sink = ++step; }
  std::int64_t global_step() const noexcept { return step; }
  float fetch(BatchLoss) const noexcept { return 1.0f / static_cast<float>(step); }
  float fetch(BatchAccuracy) const noexcept { return 0.5f; }
  void save(const fs::path& prefix) const {  // the checkpoint library wants a file
    fs::path file = prefix;
    file += ".null";
    std::ofstream(file).put('0');
  }
  void restore(const fs::path&) {}
};
NullBackend make_null_backend() { return {}; }

// ---- hooks ----------------------------------------------------------------------------------

using SummarySaver = runhooks::SummarySaverHook<runhooks::Scalars<BatchLoss, BatchAccuracy>,
                                                runhooks::Histograms<>>;
SummarySaver summary_saver(const std::string& dir) {
  return SummarySaver({.save_steps = summary_every}, dir,
                      runhooks::scalars<BatchLoss, BatchAccuracy>);
}

// What the hand-written and virtual loops write where SummarySaverHook would.
void write_summary(runhooks::EventFileSummaryWriter& writer, bool& started, std::int64_t step,
                   float loss, float accuracy) {
  if (!started) {
    writer.write_session_start(step);
    started = true;
  }
  writer.write_summary({{"loss", loss}, {"accuracy", accuracy}}, step);
}

// What a per-step .item() costs: converts the loss after every step, for a running mean.
struct EagerLossHook {
  double sum = 0.0;
  auto before_run(auto&) const { return runhooks::SessionRunArgs{runhooks::fetch<BatchLoss>()}; }
  void after_run(auto&, const auto& run_values) { sum += *run_values[BatchLoss{}]; }
};

// The directories the savers write to, one per configuration and backend type.
struct Scratch {
  fs::path root;
  Scratch() {
    root = fs::temp_directory_path() /
           ("runhooks-bench-torch-" + std::to_string(std::random_device{}()));
    fs::create_directories(root);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  std::string dir(const std::string& name) const { return (root / name).string(); }
};

runhooks::CheckpointSaverHook<> silent_saver(const std::string& dir) {
  // Never reached in the measured steps: a per-step compare, as a save every N steps has.
  return runhooks::CheckpointSaverHook<>({.checkpoint_dir = dir, .save_steps = never});
}
runhooks::StepCounterHook<runhooks::SteadyClock, runhooks::SummaryOutput> step_counter(
    const std::string& dir) {
  return runhooks::StepCounterHook({.every_n_steps = summary_every},
                                   runhooks::SummaryOutput(dir, /*log_line=*/false));
}

// ---- the three loops ------------------------------------------------------------------------

// Hand-written: the same stop, count, checkpoint and summary logic, inline.
template <class Backend>
class HandLoop {
 public:
  HandLoop(Backend backend, const std::string& dir, std::int64_t last_step)
      : backend_(std::move(backend)), counter_(dir + "/counter", /*log_line=*/false),
        summaries_(dir + "/summary"), last_step_(last_step) {
    summaries_.open();
  }

  bool should_stop() const noexcept { return stop_; }
  void run() {
    const bool summary_due = backend_.global_step() + 1 >= next_summary_;
    backend_.run();
    const std::int64_t step = backend_.global_step();
    if (summary_due) [[unlikely]]
      summarize(step);
    if (step >= next_count_) [[unlikely]]
      count(step);
    if (step == last_global_step_) [[unlikely]]
      step_sink = -1;  // the "global step has not been increased" warning
    last_global_step_ = step;
    if (step >= next_save_) [[unlikely]]
      backend_.save(fs::path("never"));
    if (step >= last_step_) [[unlikely]]
      stop_ = true;
  }
  Backend& backend() noexcept { return backend_; }

 private:
  [[gnu::noinline]] void summarize(std::int64_t step) {
    write_summary(summaries_, started_, step, backend_.fetch(BatchLoss{}),
                  backend_.fetch(BatchAccuracy{}));
    next_summary_ = step + summary_every;
  }
  [[gnu::noinline]] void count(std::int64_t step) {
    const double now = runhooks::SteadyClock::now();
    if (last_count_step_ >= 0 && now > last_count_time_)
      counter_.record("global_step/sec",
                      static_cast<double>(step - last_count_step_) / (now - last_count_time_), step);
    last_count_step_ = step;
    last_count_time_ = now;
    next_count_ = step + summary_every;
  }

  Backend backend_;
  runhooks::SummaryOutput counter_;
  runhooks::EventFileSummaryWriter summaries_;
  bool started_ = false;
  std::int64_t last_step_;
  std::int64_t next_summary_ = 1;  // the first run writes
  std::int64_t next_count_ = std::numeric_limits<std::int64_t>::min();
  std::int64_t last_count_step_ = -1;
  double last_count_time_ = 0.0;
  std::int64_t last_global_step_ = -1;
  std::int64_t next_save_ = never;
  bool stop_ = false;
};

// Virtual hooks, as TensorFlow has them and as a user writes them without runhooks: a base class
// with every hook point virtual, a vector of owning pointers, per step a request from each hook
// merged into one list of fetches, and the fetched values handed to every after_run.
enum class FetchName { loss, accuracy };
struct VirtualRunArgs {
  std::vector<FetchName> fetches;  // empty on silent steps: no allocation
};
struct VirtualRunValues {
  std::optional<float> loss, accuracy;
};

template <class Backend>
struct VirtualHook {
  using Context = runhooks::SessionRunContext<Backend>;
  virtual ~VirtualHook() = default;
  virtual void begin() {}
  virtual void after_create_session(Backend&) {}
  virtual VirtualRunArgs before_run(Context&) { return {}; }
  virtual void after_run(Context&, const VirtualRunValues&) {}
  virtual void end(Backend&) {}
};

// One of runhooks' fetch-free hooks (StopAtStep, StepCounter, CheckpointSaver) behind the
// virtual interface: the same per-step work, reached through a virtual call.
template <class Backend, class Hook>
struct VirtualAdapter final : VirtualHook<Backend> {
  using Context = runhooks::SessionRunContext<Backend>;
  using Values = runhooks::SessionRunValues<runhooks::SessionRunArgs<>>;
  Hook hook;
  explicit VirtualAdapter(Hook h) : hook(std::move(h)) {}
  void begin() override {
    if constexpr (runhooks::HasBegin<Hook>) hook.begin();
  }
  void after_create_session(Backend& backend) override {
    if constexpr (requires { hook.after_create_session(backend); }) hook.after_create_session(backend);
  }
  void after_run(Context& ctx, const VirtualRunValues&) override {
    if constexpr (runhooks::HasAfterRun<Hook, Context, Values>) hook.after_run(ctx, Values{});
  }
  void end(Backend& backend) override {
    if constexpr (runhooks::HasEnd<Hook, Backend>) hook.end(backend);
  }
};

// The summary saver written for the virtual interface.
template <class Backend>
class VirtualSummarySaver final : public VirtualHook<Backend> {
 public:
  using Context = runhooks::SessionRunContext<Backend>;
  VirtualSummarySaver(const fs::path& dir, std::int64_t every)
      : writer_(dir), every_(every) {}
  void begin() override { writer_.open(); }
  VirtualRunArgs before_run(Context& ctx) override {
    if (ctx.session().global_step() + 1 >= next_) [[unlikely]]
      return {{FetchName::loss, FetchName::accuracy}};
    return {};
  }
  void after_run(Context& ctx, const VirtualRunValues& values) override {
    if (!values.loss) [[likely]]
      return;
    const std::int64_t step = ctx.session().global_step();
    write_summary(writer_, started_, step, *values.loss, *values.accuracy);
    next_ = step + every_;
  }

 private:
  runhooks::EventFileSummaryWriter writer_;
  bool started_ = false;
  std::int64_t every_;
  std::int64_t next_ = 1;  // the first run writes
};

template <class Backend>
class VirtualSession {
 public:
  using Hooks = std::vector<std::unique_ptr<VirtualHook<Backend>>>;
  VirtualSession(Backend backend, Hooks hooks) : backend_(std::move(backend)), hooks_(std::move(hooks)) {
    for (auto& hook : hooks_) hook->begin();
    for (auto& hook : hooks_) hook->after_create_session(backend_);
  }
  ~VirtualSession() {
    for (auto& hook : hooks_) hook->end(backend_);
  }
  bool should_stop() const noexcept { return stop_; }
  void run() {
    const runhooks::SessionRunArgs<> caller_args;
    runhooks::SessionRunContext<Backend> ctx(caller_args, backend_);
    std::vector<FetchName> fetches;
    for (auto& hook : hooks_) {
      VirtualRunArgs args = hook->before_run(ctx);
      if (!args.fetches.empty()) [[unlikely]]
        fetches.insert(fetches.end(), args.fetches.begin(), args.fetches.end());
    }
    backend_.run();
    ctx.step_ran();
    VirtualRunValues values;
    for (const FetchName name : fetches) {
      if (name == FetchName::loss && !values.loss) values.loss = backend_.fetch(BatchLoss{});
      if (name == FetchName::accuracy && !values.accuracy)
        values.accuracy = backend_.fetch(BatchAccuracy{});
    }
    for (auto& hook : hooks_) hook->after_run(ctx, values);
    if (ctx.stop_requested()) [[unlikely]]
      stop_ = true;
  }
  Backend& raw_session() noexcept { return backend_; }

 private:
  Backend backend_;
  Hooks hooks_;
  bool stop_ = false;
};

// ---- measurement ----------------------------------------------------------------------------

double cpu_secs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
double wall_secs() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One configuration: runs k more steps (stopping early only if its loop says so).
struct Config {
  std::string name;
  std::function<std::int64_t(std::int64_t)> steps;  // returns the steps it ran
  std::function<std::int64_t()> global_step;
  std::function<std::vector<torch::Tensor>()> weights;  // empty for the null backend
  std::vector<double> cpu_ns, wall_ns;                   // per round, per step
};

template <class Session>
std::int64_t run_steps(Session& session, std::int64_t k) {
  std::int64_t ran = 0;
  for (; ran < k && !session.should_stop(); ++ran) session.run();
  return ran;
}

template <class Backend>
std::vector<torch::Tensor> weights_of(Backend& backend) {
  if constexpr (std::is_same_v<Backend, TorchBackend>) {
    std::vector<torch::Tensor> w;
    for (const torch::Tensor& p : backend.model()->parameters()) w.push_back(p.detach().clone());
    return w;
  } else {
    return {};
  }
}

// The four configurations over one backend type. The sessions live as long as the returned
// configurations (shared_ptr captured by the lambdas).
template <class Backend, class Make>
std::vector<Config> configs(Make make, const Scratch& scratch, const std::string& tag,
                            std::int64_t last_step) {
  std::vector<Config> out;
  {
    auto loop = std::make_shared<HandLoop<Backend>>(make(), scratch.dir(tag + "-hand"), last_step);
    out.push_back({"hand-written", [loop](std::int64_t k) { return run_steps(*loop, k); },
                   [loop] { return loop->backend().global_step(); },
                   [loop] { return weights_of(loop->backend()); }, {}, {}});
  }
  {
    const std::string dir = scratch.dir(tag + "-runhooks");
    auto session = std::make_shared<runhooks::MonitoredSession<
        Backend, runhooks::StopAtStepHook,
        runhooks::StepCounterHook<runhooks::SteadyClock, runhooks::SummaryOutput>,
        runhooks::CheckpointSaverHook<>, SummarySaver>>(
        make(), runhooks::StopAtStepHook({.last_step = last_step}), step_counter(dir + "/counter"),
        silent_saver(dir + "/ckpt"), summary_saver(dir + "/summary"));
    out.push_back({"runhooks", [session](std::int64_t k) { return run_steps(*session, k); },
                   [session] { return session->raw_session().global_step(); },
                   [session] { return weights_of(session->raw_session()); }, {}, {}});
  }
  {
    const std::string dir = scratch.dir(tag + "-virtual");
    typename VirtualSession<Backend>::Hooks hooks;
    hooks.push_back(std::make_unique<VirtualAdapter<Backend, runhooks::StopAtStepHook>>(
        runhooks::StopAtStepHook({.last_step = last_step})));
    hooks.push_back(std::make_unique<VirtualAdapter<Backend, decltype(step_counter(dir))>>(
        step_counter(dir + "/counter")));
    hooks.push_back(std::make_unique<VirtualAdapter<Backend, runhooks::CheckpointSaverHook<>>>(
        silent_saver(dir + "/ckpt")));
    hooks.push_back(std::make_unique<VirtualSummarySaver<Backend>>(dir + "/summary", summary_every));
    auto session = std::make_shared<VirtualSession<Backend>>(make(), std::move(hooks));
    out.push_back({"virtual hooks", [session](std::int64_t k) { return run_steps(*session, k); },
                   [session] { return session->raw_session().global_step(); },
                   [session] { return weights_of(session->raw_session()); }, {}, {}});
  }
  {
    const std::string dir = scratch.dir(tag + "-eager");
    auto session = std::make_shared<runhooks::MonitoredSession<
        Backend, runhooks::StopAtStepHook,
        runhooks::StepCounterHook<runhooks::SteadyClock, runhooks::SummaryOutput>,
        runhooks::CheckpointSaverHook<>, SummarySaver, EagerLossHook>>(
        make(), runhooks::StopAtStepHook({.last_step = last_step}), step_counter(dir + "/counter"),
        silent_saver(dir + "/ckpt"), summary_saver(dir + "/summary"), EagerLossHook{});
    out.push_back({"runhooks + loss .item() every step",
                   [session](std::int64_t k) { return run_steps(*session, k); },
                   [session] { return session->raw_session().global_step(); },
                   [session] { return weights_of(session->raw_session()); }, {}, {}});
  }
  return out;
}

// Runs `rounds` measured rounds (after one warm-up round) of k steps per configuration.
void measure(std::vector<Config>& cs, int rounds, std::int64_t k) {
  const std::size_t n = cs.size();
  for (int round = -1; round < rounds; ++round) {
    for (std::size_t i = 0; i < n; ++i) {
      Config& c = cs[(i + static_cast<std::size_t>(round + 1)) % n];
      const double cpu0 = cpu_secs(), wall0 = wall_secs();
      const std::int64_t ran = c.steps(k);
      const double cpu = cpu_secs() - cpu0, wall = wall_secs() - wall0;
      if (ran != k) throw std::runtime_error(c.name + " stopped early, after " + std::to_string(ran));
      if (round >= 0) {
        c.cpu_ns.push_back(1e9 * cpu / static_cast<double>(k));
        c.wall_ns.push_back(1e9 * wall / static_cast<double>(k));
      }
    }
  }
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

struct Summary {
  std::string name;
  double median, q1, q3, wall_median;
  double overhead_median = 0, overhead_q1 = 0, overhead_q3 = 0;  // % over hand-written
  double extra_median = 0, extra_q1 = 0, extra_q3 = 0;           // ns over hand-written
};

std::vector<Summary> summarize(const std::vector<Config>& cs) {
  std::vector<Summary> out;
  const std::vector<double>& hand = cs[0].cpu_ns;
  for (const Config& c : cs) {
    Summary s{c.name, quantile(c.cpu_ns, 0.5), quantile(c.cpu_ns, 0.25), quantile(c.cpu_ns, 0.75),
              quantile(c.wall_ns, 0.5)};
    // Paired by round: a round's load weighs on its hand-written loop as on the others.
    std::vector<double> ratio, extra;
    for (std::size_t r = 0; r < hand.size(); ++r) {
      ratio.push_back(100.0 * (c.cpu_ns[r] / hand[r] - 1.0));
      extra.push_back(c.cpu_ns[r] - hand[r]);
    }
    s.overhead_median = quantile(ratio, 0.5);
    s.overhead_q1 = quantile(ratio, 0.25);
    s.overhead_q3 = quantile(ratio, 0.75);
    s.extra_median = quantile(extra, 0.5);
    s.extra_q1 = quantile(extra, 0.25);
    s.extra_q3 = quantile(extra, 0.75);
    out.push_back(s);
  }
  return out;
}

// The price of one conversion, after a step (so the tensors are real).
std::pair<double, double> item_costs(std::int64_t n) {
  TorchBackend backend = make_torch_backend();
  backend.run();
  volatile float sink = 0;
  double t0 = cpu_secs();
  for (std::int64_t i = 0; i < n; ++i) sink = backend.fetch(BatchLoss{});
  const double loss_ns = 1e9 * (cpu_secs() - t0) / static_cast<double>(n);
  t0 = cpu_secs();
  for (std::int64_t i = 0; i < n; ++i) sink = backend.fetch(BatchAccuracy{});
  const double accuracy_ns = 1e9 * (cpu_secs() - t0) / static_cast<double>(n);
  (void)sink;
  return {loss_ns, accuracy_ns};
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one.empty() ? "unknown" : one + " " + five + " " + fifteen;
}

std::string fmt(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  int rounds = 21;
  std::int64_t steps = 500, null_steps = 1'000'000, item_calls = 20000;
  std::string json;
  bool smoke = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + std::string(arg));
      return argv[++i];
    };
    if (arg == "--rounds") rounds = std::stoi(value());
    else if (arg == "--steps") steps = std::stoll(value());
    else if (arg == "--null-steps") null_steps = std::stoll(value());
    else if (arg == "--json") json = value();
    else if (arg == "--smoke") smoke = true;
    else throw std::invalid_argument("unknown argument " + std::string(arg));
  }
  if (smoke) rounds = 2, steps = 20, null_steps = 1000, item_calls = 100;
  if (rounds < 1 || steps < 1 || null_steps < 1)
    throw std::invalid_argument("--rounds, --steps and --null-steps must be at least 1");

  // Warnings only: the checkpoint saver logs its saves at the start and end (outside the rounds).
  runhooks::set_log_sink([](runhooks::Severity severity, std::string_view line) {
    if (severity == runhooks::Severity::warning)
      std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  torch::set_num_threads(1);
  const std::string load_before = load_average();
  Scratch scratch;

  // Each session stops at its last measured step: StopAtStepHook fires exactly there.
  const std::int64_t last_step = (rounds + 1) * steps;
  const std::int64_t null_last_step = (rounds + 1) * null_steps;
  std::vector<Config> torch_configs = configs<TorchBackend>(make_torch_backend, scratch, "torch", last_step);
  std::vector<Config> null_configs = configs<NullBackend>(make_null_backend, scratch, "null", null_last_step);
  measure(torch_configs, rounds, steps);
  measure(null_configs, rounds, null_steps);
  const auto [loss_item_ns, accuracy_item_ns] = item_costs(item_calls);
  const std::string load_after = load_average();

  // Same work: every configuration at its last step, with the same weights, and stopped there.
  bool ok = true;
  const std::vector<torch::Tensor> reference = torch_configs[0].weights();
  for (std::vector<Config>* cs : {&torch_configs, &null_configs}) {
    const std::int64_t last = cs == &torch_configs ? last_step : null_last_step;
    for (Config& c : *cs) {
      if (c.global_step() != last || c.steps(1) != 0) {
        std::fprintf(stderr, "FAILED: %s ended at step %lld, not stopped at %lld\n", c.name.c_str(),
                     static_cast<long long>(c.global_step()), static_cast<long long>(last));
        ok = false;
      }
    }
  }
  for (Config& c : torch_configs) {
    const std::vector<torch::Tensor> w = c.weights();
    bool same = w.size() == reference.size();
    for (std::size_t i = 0; same && i < w.size(); ++i) same = torch::equal(w[i], reference[i]);
    if (!same) {
      std::fprintf(stderr, "FAILED: %s did not end with the hand-written loop's weights\n",
                   c.name.c_str());
      ok = false;
    }
  }

  const std::vector<Summary> torch_summary = summarize(torch_configs);
  const std::vector<Summary> null_summary = summarize(null_configs);
  const double torch_step = torch_summary[0].median;

  // Columns: the libtorch loop's CPU time per step and its per-round ratio to the hand-written
  // loop; the same loop over the empty backend, and its per-round difference from the
  // hand-written one, which is the hooks' own cost, also as a share of the libtorch step.
  std::ostringstream table;
  table << "| loop | libtorch step, ns (median, quartiles) | vs hand-written, per round (median, "
           "quartiles) | empty step, ns (median) | empty step, ns over hand-written, per round "
           "(median, quartiles) | that, as a share of the libtorch step |\n"
           "|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < torch_summary.size(); ++i) {
    const Summary& t = torch_summary[i];
    const Summary& z = null_summary[i];
    table << "| " << t.name << " | " << fmt("%.0f", t.median) << " (" << fmt("%.0f", t.q1) << "–"
          << fmt("%.0f", t.q3) << ") | ";
    if (i == 0)
      table << "— | ";
    else
      table << fmt("%+.2f %%", t.overhead_median) << " (" << fmt("%+.2f", t.overhead_q1) << " to "
            << fmt("%+.2f", t.overhead_q3) << ") | ";
    table << fmt("%.1f", z.median) << " | ";
    if (i == 0)
      table << "— | — |\n";
    else
      table << fmt("%+.1f", z.extra_median) << " (" << fmt("%+.1f", z.extra_q1) << " to "
            << fmt("%+.1f", z.extra_q3) << ") | " << fmt("%+.4f %%", 100.0 * z.extra_median / torch_step)
            << " |\n";
  }
  std::ostringstream notes;
  notes << "One .item() on CPU: " << fmt("%.0f", loss_item_ns) << " ns for the loss, "
        << fmt("%.0f", accuracy_item_ns)
        << " ns for the batch accuracy (argmax, compare, mean, .item()); " << rounds
        << " rounds of " << steps << " libtorch steps (" << null_steps
        << " empty steps) per loop, process CPU time; load average " << load_before
        << " before, " << load_after << " after; libtorch " << TORCH_VERSION
        << ", torch::set_num_threads(1).";

  std::printf("%s\n%s\n", table.str().c_str(), notes.str().c_str());

  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\n  \"torch_version\": \"" << TORCH_VERSION << "\",\n  \"rounds\": " << rounds
        << ",\n  \"steps_per_round\": " << steps << ",\n  \"null_steps_per_round\": " << null_steps
        << ",\n  \"load_average_before\": \"" << load_before << "\",\n  \"load_average_after\": \""
        << load_after << "\",\n  \"item_ns\": {\"loss\": " << loss_item_ns
        << ", \"accuracy\": " << accuracy_item_ns << "},\n  \"configs\": [\n";
    for (std::size_t i = 0; i < torch_summary.size(); ++i) {
      const Summary& t = torch_summary[i];
      const Summary& z = null_summary[i];
      out << "    {\"name\": \"" << t.name << "\", \"torch_ns_per_step\": {\"median\": " << t.median
          << ", \"q1\": " << t.q1 << ", \"q3\": " << t.q3 << ", \"wall_median\": " << t.wall_median
          << "}, \"overhead_pct\": {\"median\": " << t.overhead_median << ", \"q1\": "
          << t.overhead_q1 << ", \"q3\": " << t.overhead_q3
          << "}, \"empty_step_ns\": {\"median\": " << z.median << ", \"q1\": " << z.q1
          << ", \"q3\": " << z.q3 << "}, \"empty_step_extra_ns\": {\"median\": "
          << z.extra_median << ", \"q1\": " << z.extra_q1 << ", \"q3\": " << z.extra_q3
          << "}, \"share_of_torch_step_pct\": " << 100.0 * z.extra_median / torch_step << "}"
          << (i + 1 < torch_summary.size() ? "," : "") << "\n";
    }
    out << "  ],\n  \"markdown\": \"" << json_escape(table.str() + "\n" + notes.str()) << "\"\n}\n";
    if (!out) throw std::runtime_error("cannot write " + json);
  }
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_torch_loop: %s\n", e.what());
  return 1;
}
