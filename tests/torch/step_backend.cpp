// TorchStepBackend: the user's step under the backend's loop. Exact resume byte for byte (weights,
// AdamW state, the moving average, the generator and the step's data position), from a save and
// from a snapshot written later; clipping equal to torch::nn::utils::clip_grad_norm_; two
// micro-batches of b equal to one batch of 2b; the moving average equal to Lightning's formula
// computed here from the recorded weights, swapped in for evaluate() and saved as the model; the
// learning rate in every group; .item() only on fetched steps; bad options named.
#include <runhooks/torch/step_backend.hpp>

#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/core.hpp>
#include <runhooks/hooks/learning_rate.hpp>
#include <runhooks/torch/distributed/gradient_allreduce.hpp>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/utils.h>

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace fs = std::filesystem;

namespace {

using Model = torch::nn::Sequential;

constexpr std::int64_t rows = 64, features = 8, classes = 3;

struct Data {
  torch::Tensor x, y;
};
Data toy_data() {
  torch::manual_seed(11);
  torch::Tensor x = torch::randn({rows, features});
  return {x, x.narrow(1, 0, classes).argmax(1)};
}

// nanoGPT's way: each micro-batch's rows drawn from torch's generator; and a data position of its
// own (how many batches it drew, which shifts the inputs), kept by state()/restore().
struct RandomBatches {
  Data data;
  std::int64_t drawn = 0;
  torch::Tensor operator()(Model& model) {
    const torch::Tensor picked = torch::randint(rows, {8}, torch::kLong);
    const double shift = 0.01 * static_cast<double>(drawn++ % 7);
    return torch::nn::functional::cross_entropy(
        model->forward(data.x.index_select(0, picked) + shift), data.y.index_select(0, picked));
  }
  torch::Tensor state() const { return torch::tensor(std::vector<std::int64_t>{drawn}); }
  void restore(const torch::Tensor& state) { drawn = state[0].item<std::int64_t>(); }
};
static_assert(runhooks::StatefulStep<RandomBatches>);

Model make_model() {
  torch::set_num_threads(1);
  torch::manual_seed(3);  // the same initial weights every time
  return Model(torch::nn::Linear(features, 16), torch::nn::ReLU(), torch::nn::Dropout(0.1),
               torch::nn::Linear(16, classes));
}

// AdamW with weight decay on the 2-D weights only (nanoGPT's groups).
std::shared_ptr<torch::optim::AdamW> make_adamw(Model& model) {
  std::vector<torch::Tensor> decayed, other;
  for (const torch::Tensor& p : model->parameters()) (p.dim() >= 2 ? decayed : other).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(
                                   torch::optim::AdamWOptions(1e-2).weight_decay(0.1)));
  groups.emplace_back(other, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(1e-2).weight_decay(0.0)));
  return std::make_shared<torch::optim::AdamW>(groups,
                                               torch::optim::AdamWOptions(1e-2).betas({0.9, 0.99}));
}

using Backend = runhooks::TorchStepBackend<Model, torch::optim::AdamW, RandomBatches>;

Backend make_backend(runhooks::TorchStepOptions options = {.clip_grad_norm = 0.5,
                                                           .accumulation_steps = 2,
                                                           .ema_decay = 0.9}) {
  Model model = make_model();
  auto optimizer = make_adamw(model);
  return Backend(model, optimizer, RandomBatches{toy_data()}, options);
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& t : tensors) out.push_back(t.detach().clone());
  return out;
}

// The same shapes, types and bytes (torch::equal compares values).
bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.nbytes()) == 0;
}
bool same_bytes(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bytes(a[i], b[i])) return false;
  return true;
}

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

template <class B, class M>
std::vector<torch::Tensor> averages(const B& backend, M& model) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : model->parameters()) out.push_back(backend.average_of(p)->clone());
  return out;
}

// AdamW's first and second moments of every parameter, in parameter order.
std::vector<torch::Tensor> adam_moments(Backend& backend) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : backend.model()->parameters()) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(
        *backend.optimizer().state().at(p.unsafeGetTensorImpl()));
    out.push_back(state.exp_avg().clone());
    out.push_back(state.exp_avg_sq().clone());
    out.push_back(torch::tensor(std::vector<std::int64_t>{state.step()}));
  }
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("runhooks-step-backend-" + std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

struct Accuracy : runhooks::Key<float> {};

// Counts the CPU allocator's allocations while it lives.
struct CountingAllocator final : c10::Allocator {
  c10::Allocator* base = c10::GetCPUAllocator();
  std::atomic<int> allocations{0};
  CountingAllocator() { c10::SetCPUAllocator(this, /*priority=*/100); }
  ~CountingAllocator() override { c10::SetCPUAllocator(base, /*priority=*/100); }
  CountingAllocator(const CountingAllocator&) = delete;
  CountingAllocator& operator=(const CountingAllocator&) = delete;
  c10::DataPtr allocate(std::size_t n) override {
    ++allocations;
    return base->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    base->copy_data(dest, src, count);
  }
};

// Fetches the loss, the gradient norm and a metric of the step on every n-th step.
struct EveryNth {
  std::int64_t n;
  std::int64_t received = 0;
  auto before_run(auto& run_context) const {
    const bool due = (run_context.session().global_step() + 1) % n == 0;
    return runhooks::SessionRunArgs{runhooks::fetch<runhooks::BatchLoss>(due),
                                    runhooks::fetch<runhooks::GradientNorm>(due),
                                    runhooks::fetch<Accuracy>(due)};
  }
  void after_run(auto&, const auto& values) {
    if (values[runhooks::BatchLoss{}]) ++received;
    if (values[runhooks::GradientNorm{}]) ++received;
    if (values[Accuracy{}]) ++received;
  }
};

}  // namespace

static_assert(runhooks::Backend<Backend> && runhooks::HasGlobalStep<Backend>);
static_assert(runhooks::CanFetch<Backend, runhooks::BatchLoss> &&
              runhooks::CanFetch<Backend, runhooks::GradientNorm>);
static_assert(runhooks::SnapshottableInPlace<Backend> && runhooks::SnapshottableByValue<Backend>);
static_assert(runhooks::HasLearningRate<Backend>);

TEST_CASE("TorchStepBackend: resumed from a save or a later-written snapshot, it ends byte for byte "
          "as the uninterrupted run (weights, AdamW state, average, generator, data position)") {
  TempDir dir;
  constexpr int total = 12, at = 5;
  Backend straight = make_backend();
  for (int i = 0; i < total; ++i) straight.run();
  const torch::Tensor straight_rng = runhooks::detail::torch_cpu_rng_state();

  Backend first = make_backend();
  for (int i = 0; i < at; ++i) first.run();
  first.save(dir.path / "middle");
  Backend::Snapshot snapshot;
  first.snapshot(snapshot);
  for (int i = 0; i < 3; ++i) first.run();  // the snapshot keeps step 5's state
  snapshot.write(dir.path / "snapshot");
  // The next snapshot into the same object allocates no host tensor: the only allocations are the
  // step's state() tensor, which the step makes (counted here by calling it alone).
  int state_allocations = 0, snapshot_allocations = 0;
  {
    CountingAllocator counting;
    (void)first.step().state();
    state_allocations = counting.allocations.load();
  }
  {
    CountingAllocator counting;
    first.snapshot(snapshot);
    snapshot_allocations = counting.allocations.load();
  }
  CHECK(snapshot_allocations == state_allocations);
  CHECK(snapshot.global_step() == at + 3);

  for (const std::string from : {"middle", "snapshot"}) {
    CAPTURE(from);
    Backend resumed = make_backend();
    torch::manual_seed(999);  // the generator must come from the checkpoint
    resumed.run();            // and the weights, moments and average too
    resumed.restore(dir.path / from);
    CHECK(resumed.global_step() == at);
    CHECK(resumed.step().drawn == at * 2);
    CHECK(resumed.ema_updates() == at);
    for (int i = at; i < total; ++i) resumed.run();
    CHECK(same_bytes(runhooks::detail::torch_cpu_rng_state(), straight_rng));
    CHECK(same_bytes(copies(resumed.model()->parameters()), copies(straight.model()->parameters())));
    CHECK(same_bytes(adam_moments(resumed), adam_moments(straight)));
    CHECK(same_bytes(averages(resumed, resumed.model()), averages(straight, straight.model())));
    CHECK(resumed.ema_updates() == straight.ema_updates());
    CHECK(resumed.step().drawn == total * 2);
  }
}

TEST_CASE("TorchStepBackend: clipping equals torch::nn::utils::clip_grad_norm_ on the same "
          "gradients, and GradientNorm is the norm before clipping") {
  for (const double max_norm : {0.05, 1e6}) {
    CAPTURE(max_norm);
    torch::manual_seed(5);
    torch::nn::Linear model(features, classes), reference(features, classes);
    {
      const torch::NoGradGuard no_grad;
      reference->weight.copy_(model->weight);
      reference->bias.copy_(model->bias);
    }
    const torch::Tensor x = torch::randn({16, features}) * 10, target = torch::randn({16, classes});
    auto step = [&x, &target](torch::nn::Linear& m) { return (m->forward(x) - target).pow(2).mean(); };
    runhooks::TorchStepBackend backend{
        model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(1.0)),
        step, runhooks::TorchStepOptions{.clip_grad_norm = max_norm}};
    backend.run();

    torch::optim::SGD sgd(reference->parameters(), torch::optim::SGDOptions(1.0));
    sgd.zero_grad();
    (reference->forward(x) - target).pow(2).mean().backward();
    const double norm = torch::nn::utils::clip_grad_norm_(reference->parameters(), max_norm);
    sgd.step();
    CHECK(norm > 0.05);  // the small bound clips
    CHECK(torch::equal(model->weight, reference->weight));
    CHECK(torch::equal(model->bias, reference->bias));
    CHECK(backend.fetch(runhooks::GradientNorm{}) == static_cast<float>(norm));
    CHECK(backend.item_calls() == 1);
  }
}

// One tensor registered under two names (tied weights): Module::parameters() lists it twice.
struct TiedImpl : torch::nn::Module {
  torch::Tensor weight;
  TiedImpl() {
    weight = register_parameter("embedding", torch::randn({classes, features}));
    register_parameter("head", weight);
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }
};
TORCH_MODULE(Tied);

TEST_CASE("TorchStepBackend: a tied weight is counted once by clipping and averaged once, as "
          "Python's parameters() lists it") {
  torch::manual_seed(6);
  Tied model;
  REQUIRE(model->parameters().size() == 2);  // what makes counting it twice possible
  const torch::Tensor x = torch::randn({16, features}) * 10, target = torch::randn({16, classes});
  const torch::Tensor start = model->weight.detach().clone();
  runhooks::TorchStepBackend backend{
      model, std::make_shared<torch::optim::SGD>(std::vector<torch::Tensor>{model->weight}, torch::optim::SGDOptions(1.0)),
      [&x, &target](Tied& m) { return (m->forward(x) - target).pow(2).mean(); },
      runhooks::TorchStepOptions{.clip_grad_norm = 0.05, .ema_decay = 0.5}};
  backend.run();

  torch::Tensor reference = start.clone().requires_grad_(true);
  (torch::nn::functional::linear(x, reference) - target).pow(2).mean().backward();
  const double norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{reference}, 0.05);
  CHECK(backend.fetch(runhooks::GradientNorm{}) == static_cast<float>(norm));
  {
    const torch::NoGradGuard no_grad;
    CHECK(torch::equal(model->weight, start - reference.grad()));
  }
  CHECK(torch::equal(*backend.average_of(model->weight), model->weight));  // the first update copies
}

TEST_CASE("TorchStepBackend: two micro-batches of b accumulate to one batch of 2b (mean loss)") {
  const Data data = toy_data();
  torch::manual_seed(7);
  torch::nn::Linear a(features, classes), b(features, classes);
  {
    const torch::NoGradGuard no_grad;
    b->weight.copy_(a->weight);
    b->bias.copy_(a->bias);
  }
  std::int64_t next = 0;  // which 16 rows the step trains on; halves of 8 for the accumulating one
  auto halves = [&data, &next](torch::nn::Linear& m) {
    const torch::Tensor x = data.x.narrow(0, next * 8 % rows, 8), y = data.y.narrow(0, next * 8 % rows, 8);
    ++next;
    return torch::nn::functional::cross_entropy(m->forward(x), y);
  };
  const torch::Tensor initial = a->weight.detach().clone();
  std::int64_t whole_next = 0;
  auto whole = [&data, &whole_next](torch::nn::Linear& m) {
    const torch::Tensor x = data.x.narrow(0, whole_next * 16 % rows, 16),
                        y = data.y.narrow(0, whole_next * 16 % rows, 16);
    ++whole_next;
    return torch::nn::functional::cross_entropy(m->forward(x), y);
  };
  runhooks::TorchStepBackend accumulating{
      a, std::make_shared<torch::optim::SGD>(a->parameters(), torch::optim::SGDOptions(0.5)), halves,
      runhooks::TorchStepOptions{.accumulation_steps = 2}};
  runhooks::TorchStepBackend one{
      b, std::make_shared<torch::optim::SGD>(b->parameters(), torch::optim::SGDOptions(0.5)), whole};
  for (int i = 0; i < 3; ++i) {
    accumulating.run();
    one.run();
    CHECK(accumulating.fetch(runhooks::BatchLoss{}) ==
          doctest::Approx(one.fetch(runhooks::BatchLoss{})).epsilon(1e-6));
  }
  CHECK(next == 6);
  CHECK(torch::allclose(a->weight, b->weight, /*rtol=*/1e-5, /*atol=*/1e-6));
  CHECK(torch::allclose(a->bias, b->bias, 1e-5, 1e-6));
  CHECK(!torch::allclose(a->weight, initial, 1e-3, 1e-4));  // it trained
}

TEST_CASE("TorchStepBackend: the moving average follows Lightning's EMAWeightAveraging, is "
          "swapped in for evaluate() and saved as the model") {
  const Data data = toy_data();
  const auto run = [&data](runhooks::TorchStepOptions options, int steps,
                           std::vector<std::vector<torch::Tensor>>& recorded) {
    torch::manual_seed(9);
    torch::nn::Linear model(features, classes);
    auto step = [&data](torch::nn::Linear& m) {
      return torch::nn::functional::cross_entropy(m->forward(data.x), data.y);
    };
    runhooks::TorchStepBackend backend{
        model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.5)),
        step, options};
    for (int i = 0; i < steps; ++i) {
      backend.run();
      recorded.push_back(copies(model->parameters()));
    }
    return backend;
  };
  SUBCASE("every step: the first update copies, then decay * average + (1 - decay) * weight") {
    std::vector<std::vector<torch::Tensor>> w;
    auto backend = run({.ema_decay = 0.9}, 6, w);
    CHECK(backend.ema_updates() == 6);
    const std::vector<torch::Tensor> params = backend.model()->parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      torch::Tensor expected = w[0][p].clone();
      for (std::size_t t = 1; t < w.size(); ++t) expected = 0.9 * expected + (1 - 0.9) * w[t][p];
      CHECK(torch::allclose(*backend.average_of(params[p]), expected, 1e-6, 1e-7));
      CHECK(!torch::allclose(*backend.average_of(params[p]), w.back()[p], 1e-3, 1e-4));
    }
  }
  SUBCASE("from step index 2, every second step (update_starting_at_step, update_every_n_steps)") {
    std::vector<std::vector<torch::Tensor>> w;
    auto backend = run({.ema_decay = 0.9, .ema_start_step = 2, .ema_every_n_steps = 2}, 6, w);
    CHECK(backend.ema_updates() == 2);  // after the steps of index 2 and 4
    const std::vector<torch::Tensor> params = backend.model()->parameters();
    for (std::size_t p = 0; p < params.size(); ++p) {
      const torch::Tensor expected = 0.9 * w[2][p] + (1 - 0.9) * w[4][p];
      CHECK(torch::allclose(*backend.average_of(params[p]), expected, 1e-6, 1e-7));
    }
  }
  SUBCASE("evaluate(): the average inside, in eval mode without gradients; the weights after") {
    std::vector<std::vector<torch::Tensor>> w;
    auto backend = run({.ema_decay = 0.9}, 4, w);
    const std::vector<torch::Tensor> params = backend.model()->parameters();
    const std::vector<torch::Tensor> average = averages(backend, backend.model());
    const bool inside = backend.evaluate([&](torch::nn::Linear& m) {
      return !m->is_training() && !torch::GradMode::is_enabled() &&
             bitwise_equal(copies(m->parameters()), average);
    });
    CHECK(inside);
    CHECK(backend.model()->is_training());
    CHECK(bitwise_equal(copies(params), w.back()));
    CHECK_THROWS_AS(backend.evaluate([](torch::nn::Linear&) -> int { throw std::runtime_error("x"); }),
                    std::runtime_error);
    CHECK(backend.model()->is_training());
    CHECK(bitwise_equal(copies(params), w.back()));

    TempDir dir;
    backend.save(dir.path / "ema");
    torch::serialize::InputArchive archive, model_archive, current_archive;
    archive.load_from((dir.path / "ema.pt").string());
    archive.read("model", model_archive);
    archive.read("current_model", current_archive);
    torch::Tensor saved_weight, current_weight;
    model_archive.read("weight", saved_weight);
    current_archive.read("weight", current_weight);
    CHECK(torch::equal(saved_weight, average[0]));
    CHECK(torch::equal(current_weight, w.back()[0]));

    // A file with an average does not restore into a backend without one, nor the reverse.
    torch::nn::Linear plain(features, classes);
    runhooks::TorchStepBackend no_average{
        plain, std::make_shared<torch::optim::SGD>(plain->parameters(), torch::optim::SGDOptions(0.5)),
        [](torch::nn::Linear& m) { return m->weight.sum(); }};
    const torch::Tensor before = plain->weight.detach().clone();
    CHECK_THROWS_WITH_AS(no_average.restore(dir.path / "ema"),
                         doctest::Contains("was written with a moving average"), std::runtime_error);
    CHECK(torch::equal(plain->weight, before));
    no_average.save(dir.path / "plain");
    CHECK_THROWS_WITH_AS(backend.restore(dir.path / "plain"),
                         doctest::Contains("was written without a moving average"), std::runtime_error);
    CHECK(bitwise_equal(copies(params), w.back()));
  }
}

// Two ranks whose gradients are equal: the sum doubles them, and GradientAllreduce halves it back.
struct TwoEqualRanks {
  int size() const { return 2; }
  void allreduce_sum(torch::Tensor& flat) { flat.mul_(2); }
};

TEST_CASE("TorchStepBackend: GradientAllreduce runs once per step, after the micro-batches' "
          "backward passes, on the gradients of the model (buckets as gradient views)") {
  const Data data = toy_data();
  const auto make = [&data](auto... sync) {
    torch::manual_seed(8);
    torch::nn::Linear model(features, classes);
    std::int64_t next = 0;
    auto step = [&data, next](torch::nn::Linear& m) mutable {
      const torch::Tensor x = data.x.narrow(0, next * 8 % rows, 8), y = data.y.narrow(0, next * 8 % rows, 8);
      ++next;
      return torch::nn::functional::cross_entropy(m->forward(x), y);
    };
    return runhooks::TorchStepBackend{
        model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.5).momentum(0.9)),
        step, sync..., runhooks::TorchStepOptions{.clip_grad_norm = 0.1, .accumulation_steps = 2}};
  };
  auto alone = make();
  auto synced = make(runhooks::GradientAllreduce<TwoEqualRanks>(TwoEqualRanks{}));
  for (int i = 0; i < 4; ++i) {
    alone.run();
    synced.run();
  }
  CHECK(synced.gradient_sync().calls() == 4);
  CHECK(same_bytes(copies(synced.model()->parameters()), copies(alone.model()->parameters())));
  CHECK(synced.fetch(runhooks::GradientNorm{}) == alone.fetch(runhooks::GradientNorm{}));
}

TEST_CASE("TorchStepBackend: the learning rate reaches every parameter group and the checkpoint") {
  Backend backend = make_backend({});
  backend.set_learning_rate(0.25);
  for (const auto& group : backend.optimizer().param_groups()) CHECK(group.options().get_lr() == 0.25);
  CHECK(backend.learning_rate() == 0.25);
  backend.set_learning_rate(0.0);
  const std::vector<torch::Tensor> before = copies(backend.model()->parameters());
  backend.run();  // AdamW at rate 0: neither the step nor the weight decay moves a weight
  CHECK(bitwise_equal(copies(backend.model()->parameters()), before));
  TempDir dir;
  backend.set_learning_rate(0.125);
  backend.save(dir.path / "lr");
  backend.set_learning_rate(0.5);
  backend.restore(dir.path / "lr");
  for (const auto& group : backend.optimizer().param_groups()) CHECK(group.options().get_lr() == 0.125);
}

TEST_CASE("TorchStepBackend: .item() only on the steps a hook fetches; metrics of a StepOutput "
          "fetched by key, averaged over micro-batches") {
  const Data data = toy_data();
  const auto make = [&data](std::int64_t accumulation) {
    torch::manual_seed(4);
    torch::nn::Linear model(features, classes);
    auto step = [&data](torch::nn::Linear& m) {
      const torch::Tensor logits = m->forward(data.x);
      return runhooks::StepOutput<Accuracy>{
          torch::nn::functional::cross_entropy(logits, data.y),
          {logits.argmax(1).eq(data.y).to(torch::kFloat).mean()}};
    };
    return runhooks::TorchStepBackend{
        model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1)),
        step, runhooks::TorchStepOptions{.accumulation_steps = accumulation}};
  };
  SUBCASE("no hook fetches: no conversion") {
    runhooks::MonitoredSession session{make(1), runhooks::StopAtStepHook({.last_step = 30})};
    while (!session.should_stop()) session.run();
    CHECK(session.raw_session().item_calls() == 0);
  }
  SUBCASE("three keys every 10th step: 9 conversions in 30 steps") {
    runhooks::MonitoredSession session{make(2), runhooks::StopAtStepHook({.last_step = 30}),
                                       EveryNth{.n = 10}};
    while (!session.should_stop()) session.run();
    CHECK(session.hook<EveryNth>().received == 9);
    CHECK(session.raw_session().item_calls() == 9);
  }
  SUBCASE("the metric is the step's, and NaN before the first step") {
    auto backend = make(2);
    CHECK(std::isnan(backend.fetch(Accuracy{})));
    CHECK(std::isnan(backend.fetch(runhooks::BatchLoss{})));
    const torch::Tensor weight = backend.model()->weight.detach().clone(),
                        bias = backend.model()->bias.detach().clone();
    backend.run();
    // Both micro-batches saw the same rows and weights: their mean is the metric of either.
    const torch::Tensor logits = torch::nn::functional::linear(data.x, weight, bias);
    CHECK(backend.fetch(Accuracy{}) ==
          doctest::Approx(logits.argmax(1).eq(data.y).to(torch::kFloat).mean().item<float>()));
    CHECK(backend.fetch(runhooks::BatchLoss{}) ==
          doctest::Approx(torch::nn::functional::cross_entropy(logits, data.y).item<float>()));
    CHECK(backend.item_calls() == 2);
  }
}

TEST_CASE("TorchStepOptions: a bad option is std::invalid_argument naming the option and value") {
  using Options = runhooks::TorchStepOptions;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(Options{.clip_grad_norm = 0.0}.validate(),
                       doctest::Contains("TorchStepOptions::clip_grad_norm must be greater than 0 "
                                         "and finite (or std::nullopt: no clipping), got 0."),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Options{.clip_grad_norm = -1.0}.validate(), doctest::Contains("got -1."),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Options{.clip_grad_norm = nan}.validate(),
                       doctest::Contains("clip_grad_norm must be greater than 0 and finite"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Options{.clip_grad_norm = nan}.validate(), doctest::Contains("got nan."),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Options{.accumulation_steps = 0}.validate(),
                       doctest::Contains("TorchStepOptions::accumulation_steps must be at least 1, got 0."),
                       std::invalid_argument);
  for (const double decay : {0.0, 1.0, -0.5, 1.5, nan}) {
    CAPTURE(decay);
    CHECK_THROWS_WITH_AS(Options{.ema_decay = decay}.validate(),
                         doctest::Contains("TorchStepOptions::ema_decay must be greater than 0 and "
                                           "less than 1"),
                         std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(Options{.ema_decay = 1.0}.validate(), doctest::Contains("got 1."),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Options{.ema_every_n_steps = 0}.validate(),
                       doctest::Contains("TorchStepOptions::ema_every_n_steps must be at least 1, got 0."),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Options{.ema_start_step = -1}.validate(),
                       doctest::Contains("TorchStepOptions::ema_start_step must be at least 0, got -1."),
                       std::invalid_argument);
  if (!at::hasCUDA())
    CHECK_THROWS_WITH_AS(Options{.device = torch::kCUDA}.validate(),
                         doctest::Contains("TorchStepOptions::device must be a device this libtorch has"),
                         std::invalid_argument);
  CHECK_NOTHROW((Options{.clip_grad_norm = 1.0, .accumulation_steps = 4, .ema_decay = 0.999}.validate()));
  // The backend checks them when it is made.
  CHECK_THROWS_WITH_AS(make_backend({.accumulation_steps = 0}), doctest::Contains("accumulation_steps"),
                       std::invalid_argument);
  // A step whose loss is not a scalar that requires grad is named at the first run().
  torch::nn::Linear model(features, classes);
  runhooks::TorchStepBackend bad{
      model, std::make_shared<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1)),
      [](torch::nn::Linear& m) { return m->weight; }};
  CHECK_THROWS_WITH_AS(bad.run(), doctest::Contains("a loss Float[3, 8]"), std::invalid_argument);
}
