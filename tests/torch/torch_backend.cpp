// TorchBackend and TensorBatches: fetches convert tensors only on the steps a hook switched them
// on (counted .item() calls), checkpoints restore a backend that continues bit for bit as the
// uninterrupted one, and the batch of a step depends on the seed and the step alone. Snapshots
// copy the state into host tensors they reuse; a snapshot written after more steps, and an
// asynchronous save of the hook, hold the state of their step. Sharded batches make the global
// batch; checkpoints carry the random state and the data position (earlier archives restore);
// GradientAllreduce's buckets and options, on an engine that echoes.
// First, alone: this TU is tensor_batches.hpp's self-containment check (tests/torch/meson.build).
#include <runhooks/torch/tensor_batches.hpp>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/core.hpp>
#include <runhooks/hooks/reduce_lr_on_plateau_hook.hpp>
#include <runhooks/torch/distributed/gradient_allreduce.hpp>
#include <runhooks/torch/torch_backend.hpp>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/utils.h>

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace fs = std::filesystem;
using runhooks::BatchAccuracy;
using runhooks::BatchLoss;

namespace {

using Model = torch::nn::Sequential;
using Backend = runhooks::TorchBackend<Model, torch::optim::SGD>;

constexpr std::int64_t rows = 200, features = 8, classes = 3;

// A learnable toy problem: the class is which of the first three features is largest.
runhooks::TensorBatches toy_batches(std::uint64_t seed = 7) {
  torch::manual_seed(11);
  torch::Tensor x = torch::randn({rows, features});
  torch::Tensor y = x.narrow(1, 0, classes).argmax(1);
  return runhooks::TensorBatches(x, y, /*batch_size=*/16, seed);
}

Backend make_backend(std::uint64_t seed = 7) {
  torch::set_num_threads(1);
  torch::manual_seed(3);  // the same initial weights every time
  return Backend(Model(torch::nn::Linear(features, 16), torch::nn::ReLU(),
                       torch::nn::Linear(16, classes)),
                 toy_batches(seed), torch::optim::SGDOptions(0.1).momentum(0.9));
}

// Switches its loss and accuracy fetches on every n-th step only, and counts what it received.
struct EveryNthFetch {
  std::int64_t n;
  std::int64_t losses = 0, accuracies = 0;
  std::optional<float> last_loss{};
  auto before_run(auto& run_context) const {
    const bool due = (run_context.session().global_step() + 1) % n == 0;
    return runhooks::SessionRunArgs{runhooks::fetch<BatchLoss>(due),
                                    runhooks::fetch<BatchAccuracy>(due)};
  }
  void after_run(auto&, const auto& run_values) {
    if (run_values[BatchLoss{}]) ++losses, last_loss = run_values[BatchLoss{}];
    if (run_values[BatchAccuracy{}]) ++accuracies;
  }
};

struct Silent {
  void record(std::string_view, double, std::int64_t) {}
};

std::vector<torch::Tensor> parameters(Backend& backend) {
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& p : backend.model()->parameters()) copies.push_back(p.detach().clone());
  return copies;
}

bool bitwise_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("runhooks-torch-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "-" +
            std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

}  // namespace

static_assert(runhooks::Backend<Backend> && runhooks::HasGlobalStep<Backend>);
static_assert(runhooks::CanFetch<Backend, BatchLoss> && runhooks::CanFetch<Backend, BatchAccuracy>);
static_assert(runhooks::Checkpointable<Backend> && runhooks::Snapshottable<Backend>);
static_assert(runhooks::SnapshottableInPlace<Backend> && runhooks::SnapshottableByValue<Backend>);

TEST_CASE("silent steps convert no tensor: .item() runs only where a hook switched a fetch on") {
  SUBCASE("hooks that fetch nothing") {
    runhooks::MonitoredSession session{make_backend(),
                                       runhooks::StopAtStepHook({.last_step = 120}),
                                       runhooks::StepCounterHook({.every_n_steps = 10}, Silent{})};
    while (!session.should_stop()) session.run();
    CHECK(session.raw_session().global_step() == 120);
    CHECK(session.raw_session().item_calls() == 0);
  }
  SUBCASE("a hook fetching loss and accuracy every 25th step") {
    runhooks::MonitoredSession session{make_backend(),
                                       runhooks::StopAtStepHook({.last_step = 120}),
                                       EveryNthFetch{.n = 25}};
    while (!session.should_stop()) session.run();
    const auto& hook = session.hook<EveryNthFetch>();
    CHECK(hook.losses == 4);  // steps 25, 50, 75, 100
    CHECK(hook.accuracies == 4);
    CHECK(session.raw_session().item_calls() == 8);
  }
  SUBCASE("two hooks fetching the same key on the same step: converted once") {
    runhooks::MonitoredSession session{make_backend(),
                                       runhooks::StopAtStepHook({.last_step = 100}),
                                       EveryNthFetch{.n = 10}, EveryNthFetch{.n = 10}};
    while (!session.should_stop()) session.run();
    CHECK(session.hook<1>().losses == 10);
    CHECK(session.hook<2>().losses == 10);
    CHECK(session.raw_session().item_calls() == 20);
  }
  SUBCASE("the caller fetching the loss on every step: one conversion per step") {
    runhooks::MonitoredSession session{make_backend(),
                                       runhooks::StopAtStepHook({.last_step = 50})};
    while (!session.should_stop())
      session.run(runhooks::SessionRunArgs{runhooks::fetch<BatchLoss>()});
    CHECK(session.raw_session().item_calls() == 50);
  }
}

TEST_CASE("the backend learns: batch loss falls and accuracy on all rows rises") {
  runhooks::MonitoredSession session{make_backend(), runhooks::StopAtStepHook({.last_step = 300}),
                                     EveryNthFetch{.n = 10}};
  Backend& backend = session.raw_session();
  const runhooks::TensorBatches all = toy_batches();
  const float before = backend.accuracy(all.inputs(), all.targets());
  CHECK(backend.model()->is_training());  // accuracy() puts the model back into training mode
  const float first_loss = session.run(runhooks::SessionRunArgs{runhooks::fetch<BatchLoss>()})
                               [BatchLoss{}].value();
  while (!session.should_stop()) session.run();
  const float after = backend.accuracy(all.inputs(), all.targets());
  INFO("accuracy " << before << " -> " << after << ", loss " << first_loss << " -> "
                   << *session.hook<EveryNthFetch>().last_loss);
  CHECK(after > 0.9f);
  CHECK(after > before + 0.3f);
  CHECK(*session.hook<EveryNthFetch>().last_loss < 0.5f * first_loss);
}

TEST_CASE("fetches before the first step are NaN and convert nothing") {
  Backend backend = make_backend();
  CHECK(std::isnan(backend.fetch(BatchLoss{})));
  CHECK(std::isnan(backend.fetch(BatchAccuracy{})));
  CHECK(backend.item_calls() == 0);
}

TEST_CASE("save and restore: a restored backend continues bit for bit as the uninterrupted one") {
  TempDir dir;
  const fs::path prefix = dir.path / "model.ckpt-30";

  Backend uninterrupted = make_backend();
  for (int i = 0; i < 30; ++i) uninterrupted.run();
  uninterrupted.save(prefix);
  CHECK(fs::is_regular_file(dir.path / "model.ckpt-30.pt"));
  const Backend::Snapshot at_30 = uninterrupted.snapshot();  // written later, after more steps
  for (int i = 0; i < 45; ++i) uninterrupted.run();  // into the next epochs (12 batches each)

  // Different initial weights and a fresh optimizer (no momentum yet): the checkpoint must carry
  // all of it, and the step, for the batches and the updates to match.
  torch::manual_seed(99);
  Backend resumed(Model(torch::nn::Linear(features, 16), torch::nn::ReLU(),
                        torch::nn::Linear(16, classes)),
                  toy_batches(), torch::optim::SGDOptions(0.1).momentum(0.9));
  CHECK_FALSE(bitwise_equal(parameters(resumed), parameters(uninterrupted)));
  CHECK(resumed.optimizer().state().empty());
  resumed.restore(prefix);
  CHECK(resumed.global_step() == 30);
  CHECK(resumed.optimizer().state().size() == 4);  // a momentum buffer per parameter tensor
  CHECK(std::isnan(resumed.fetch(BatchLoss{})));  // no step since the restore
  for (int i = 0; i < 45; ++i) resumed.run();
  CHECK(resumed.global_step() == 75);
  CHECK(bitwise_equal(parameters(resumed), parameters(uninterrupted)));
  CHECK(resumed.fetch(BatchLoss{}) == uninterrupted.fetch(BatchLoss{}));

  SUBCASE("a snapshot written later holds the state it was taken in") {
    at_30.write(dir.path / "snapshot-30");
    Backend from_snapshot = make_backend();
    from_snapshot.restore(dir.path / "snapshot-30");
    CHECK(from_snapshot.global_step() == 30);
    for (int i = 0; i < 45; ++i) from_snapshot.run();
    CHECK(bitwise_equal(parameters(from_snapshot), parameters(uninterrupted)));
  }
  SUBCASE("restoring the step-0 checkpoint gives back the fresh backend, momentum and all") {
    Backend fresh = make_backend();
    fresh.save(dir.path / "model.ckpt-0");
    for (int i = 0; i < 20; ++i) fresh.run();
    resumed.restore(dir.path / "model.ckpt-0");
    CHECK(resumed.global_step() == 0);
    Backend reference = make_backend();
    for (int i = 0; i < 20; ++i) resumed.run(), reference.run();
    CHECK(bitwise_equal(parameters(resumed), parameters(reference)));
  }
}

static_assert(runhooks::HasLearningRate<Backend>);

// Issue 27: the learning-rate hooks drive TorchBackend's optimizer: the rate is set in every
// parameter group, the step uses it, and the checkpoint carries it.
TEST_CASE("the learning rate: set in every parameter group, used by the step, kept by a checkpoint") {
  TempDir dir;
  Backend backend = make_backend();
  CHECK(backend.learning_rate() == doctest::Approx(0.1));
  backend.optimizer().add_param_group(torch::optim::OptimizerParamGroup(
      {torch::zeros({1}, torch::requires_grad())},
      std::make_unique<torch::optim::SGDOptions>(0.3)));
  backend.set_learning_rate(0.025);
  for (auto& group : backend.optimizer().param_groups())
    CHECK(group.options().get_lr() == doctest::Approx(0.025));

  // One step at rate 0 changes no weight; the rate is what the step reads.
  backend.set_learning_rate(0.0);
  const std::vector<torch::Tensor> before = parameters(backend);
  backend.run();
  CHECK(bitwise_equal(parameters(backend), before));

  backend.set_learning_rate(0.0125);
  backend.save(dir.path / "model.ckpt-1");
  Backend resumed = make_backend();
  resumed.optimizer().add_param_group(torch::optim::OptimizerParamGroup(
      {torch::zeros({1}, torch::requires_grad())},
      std::make_unique<torch::optim::SGDOptions>(0.3)));
  resumed.restore(dir.path / "model.ckpt-1");
  CHECK(resumed.learning_rate() == doctest::Approx(0.0125));

  SUBCASE("ReduceLROnPlateauHook halves it on every check that is no improvement") {
    Backend trained = make_backend();
    runhooks::ReduceLROnPlateauHook<BatchLoss> plateau(
        {.factor = 0.5, .patience = 0, .min_delta = 1e9});
    runhooks::SingularMonitoredSession session{std::move(trained), std::ref(plateau)};
    for (int i = 0; i < 3; ++i) session.run();  // the first check sets the best, two reduce
    CHECK(session.raw_session().learning_rate() == doctest::Approx(0.025));
    CHECK(plateau.reductions() == 2);
  }
}

TEST_CASE("a checkpoint that cannot be restored throws and leaves the backend as it was") {
  TempDir dir;
  Backend backend = make_backend();
  for (int i = 0; i < 5; ++i) backend.run();
  const std::vector<torch::Tensor> before = parameters(backend);
  const auto unchanged = [&] {
    CHECK(backend.global_step() == 5);
    CHECK(bitwise_equal(parameters(backend), before));
    CHECK(backend.model()->parameters()[0].sizes() == torch::IntArrayRef{16, 8});
  };

  SUBCASE("no file") {
    CHECK_THROWS(backend.restore(dir.path / "absent"));
    unchanged();
  }
  SUBCASE("a torn file: the first half of a checkpoint") {
    Backend other = make_backend();
    other.save(dir.path / "torn");
    const fs::path file = Backend::checkpoint_file(dir.path / "torn");
    fs::resize_file(file, fs::file_size(file) / 2);
    CHECK_THROWS(backend.restore(dir.path / "torn"));
    unchanged();
  }
  SUBCASE("another architecture") {
    torch::manual_seed(1);
    Backend other(Model(torch::nn::Linear(features, 5), torch::nn::ReLU(),
                        torch::nn::Linear(5, classes)),
                  toy_batches(), torch::optim::SGDOptions(0.1));
    other.save(dir.path / "other");
    CHECK_THROWS_WITH(
        backend.restore(dir.path / "other"),
        doctest::Contains("holds 0.weight as Float[5, 8], the model has Float[16, 8]"));
    unchanged();
  }
  SUBCASE("another optimizer: the model is put back after its state fails to load") {
    torch::manual_seed(1);
    runhooks::TorchBackend<Model, torch::optim::Adam> other(
        Model(torch::nn::Linear(features, 16), torch::nn::ReLU(), torch::nn::Linear(16, classes)),
        toy_batches(), torch::optim::AdamOptions(0.01));
    for (int i = 0; i < 3; ++i) other.run();
    other.save(dir.path / "adam");
    CHECK_THROWS(backend.restore(dir.path / "adam"));
    unchanged();
    for (int i = 0; i < 10; ++i) backend.run();  // and it still trains
    CHECK(backend.global_step() == 15);
  }
}

TEST_CASE("TensorBatches: a step's batch depends on the seed and the step alone") {
  runhooks::TensorBatches a = toy_batches(5), b = toy_batches(5), c = toy_batches(6);
  CHECK(a.batches_per_epoch() == rows / 16);
  // Any order of requests gives the same batches.
  const auto late = a.batch(40);
  (void)b.batch(3);
  CHECK(torch::equal(b.batch(40).first, late.first));
  CHECK(torch::equal(b.batch(40).second, late.second));
  CHECK_FALSE(torch::equal(c.batch(40).first, late.first));

  // One epoch visits batch_size * batches_per_epoch distinct rows, each once.
  std::set<std::vector<float>> seen;
  for (std::int64_t step = 12; step < 24; ++step) {  // the second epoch
    const torch::Tensor x = a.batch(step).first.contiguous();
    for (std::int64_t r = 0; r < x.size(0); ++r) {
      const torch::Tensor row = x[r];
      seen.emplace(row.data_ptr<float>(), row.data_ptr<float>() + features);
    }
  }
  CHECK(seen.size() == 12 * 16);
  CHECK_FALSE(torch::equal(a.batch(0).first, a.batch(12).first));  // a new order each epoch

  CHECK_THROWS_AS(runhooks::TensorBatches(torch::zeros({4, 2}), torch::zeros({3}), 2, 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(runhooks::TensorBatches(torch::zeros({4, 2}), torch::zeros({4}), 5, 0),
                  std::invalid_argument);
}

TEST_CASE("TensorBatches sharded: rank r of W trains on its slice of the global batch, whatever W") {
  runhooks::TensorBatches whole = toy_batches(5);
  for (const std::int64_t ranks : {1, 2, 4, 8}) {
    std::vector<runhooks::TensorBatches> shards;
    for (std::int64_t r = 0; r < ranks; ++r)
      shards.emplace_back(whole.inputs(), whole.targets(), 16, 5,
                          runhooks::TensorBatches::Shard{.rank = r, .num_replicas = ranks});
    for (const std::int64_t step : {0, 11, 12, 40}) {
      std::vector<torch::Tensor> xs, ys;
      for (auto& shard : shards) {
        auto [x, y] = shard.batch(step);
        CHECK(x.size(0) == 16 / ranks);
        xs.push_back(x);
        ys.push_back(y);
      }
      const auto [x, y] = whole.batch(step);
      CHECK(torch::equal(torch::cat(xs), x));  // disjoint slices that make the global batch
      CHECK(torch::equal(torch::cat(ys), y));
    }
  }
  CHECK_THROWS_WITH(runhooks::TensorBatches(whole.inputs(), whole.targets(), 16, 5, {.rank = 0, .num_replicas = 3}),
                    doctest::Contains("the global batch_size 16 is not a multiple of the number "
                                      "of ranks (Shard::num_replicas) 3"));
  CHECK_THROWS_WITH(runhooks::TensorBatches(whole.inputs(), whole.targets(), 16, 5, {.rank = 2, .num_replicas = 2}),
                    doctest::Contains("got rank 2 of num_replicas 2"));
}

TEST_CASE("a checkpoint holds the CPU random state and the data position; earlier archives restore") {
  TempDir dir;
  Backend backend = make_backend();
  for (int i = 0; i < 20; ++i) backend.run();
  torch::manual_seed(1234);
  backend.save(dir.path / "at-20");
  const torch::Tensor after_save = torch::randn({4});
  (void)torch::randn({100});
  Backend other = make_backend();
  other.restore(dir.path / "at-20");
  CHECK(torch::equal(torch::randn({4}), after_save));  // the generator is where the save left it
  CHECK(other.global_step() == 20);

  SUBCASE("another seed or global batch size is refused, naming both values") {
    const auto with = [](std::uint64_t seed, std::int64_t batch) {
      torch::manual_seed(3);
      return Backend(Model(torch::nn::Linear(features, 16), torch::nn::ReLU(),
                           torch::nn::Linear(16, classes)),
                     runhooks::TensorBatches(toy_batches().inputs(), toy_batches().targets(),
                                             batch, seed),
                     torch::optim::SGDOptions(0.1).momentum(0.9));
    };
    Backend seed_8 = with(8, 16);
    CHECK_THROWS_WITH(seed_8.restore(dir.path / "at-20"),
                      doctest::Contains("was written with the data seed 7, this backend's "
                                        "TensorBatches has 8"));
    CHECK(seed_8.global_step() == 0);
    Backend batch_8 = with(7, 8);
    CHECK_THROWS_WITH(batch_8.restore(dir.path / "at-20"),
                      doctest::Contains("the global batch size 16, this backend's TensorBatches "
                                        "has 8"));
  }
  SUBCASE("an archive of an earlier version (no rng_state, no data keys) restores the rest") {
    torch::serialize::OutputArchive archive, model_archive, optimizer_archive;
    backend.model()->save(model_archive);
    backend.optimizer().save(optimizer_archive);
    archive.write("model", model_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("global_step", c10::IValue(std::int64_t{20}));
    archive.save_to(Backend::checkpoint_file(dir.path / "old").string());
    Backend old = make_backend();
    old.restore(dir.path / "old");
    CHECK(old.global_step() == 20);
    for (int i = 0; i < 5; ++i) old.run(), backend.run();
    CHECK(bitwise_equal(parameters(old), parameters(backend)));
  }
}

// A GradientAllreduceEngine of `ranks` ranks that all hold this rank's gradients: the sum is
// ranks times them, so the average leaves them unchanged. Records every bucket's size.
struct EchoEngine {
  int ranks = 2;
  std::vector<std::int64_t>* sizes;
  int size() const { return ranks; }
  void allreduce_sum(torch::Tensor& flat) {
    sizes->push_back(flat.numel());
    flat.mul_(ranks);
  }
};

TEST_CASE("GradientAllreduce: buckets of at most bucket_cap_mb, in reverse parameter order; the "
          "average of equal gradients is themselves; the gradients are the buckets' slices") {
  using Sync = runhooks::GradientAllreduce<EchoEngine>;
  using SyncBackend = runhooks::TorchBackend<Model, torch::optim::SGD, runhooks::CrossEntropyLoss, Sync>;
  std::vector<std::int64_t> sizes;
  // Parameters: 16x8, 16, 3x16, 3 floats. A cap of 300 bytes (75 floats), from the last:
  // [3 + 48 + 16] [128].
  torch::manual_seed(3);
  SyncBackend synced(Model(torch::nn::Linear(features, 16), torch::nn::ReLU(),
                           torch::nn::Linear(16, classes)),
                     toy_batches(), Sync(EchoEngine{2, &sizes}, {.bucket_cap_mb = 300.0 / (1 << 20)}),
                     torch::optim::SGDOptions(0.1).momentum(0.9));
  Backend plain = make_backend();
  for (int i = 0; i < 10; ++i) synced.run(), plain.run();
  CHECK(bitwise_equal(synced.model()->parameters(), parameters(plain)));
  CHECK(synced.gradient_sync().bucket_bytes() == std::vector<std::int64_t>{67 * 4, 128 * 4});
  CHECK(sizes.size() == 20);
  CHECK(synced.gradient_sync().calls() == 10);
  // The gradients are the buckets' slices (DDP's gradient_as_bucket_view): those of one bucket
  // share its storage, and backward() accumulated into them, with results bit for bit those of
  // the plain backend above.
  const std::vector<torch::Tensor> synced_parameters = synced.model()->parameters();
  CHECK(synced_parameters[1].grad().is_alias_of(synced_parameters[2].grad()));
  CHECK(synced_parameters[2].grad().is_alias_of(synced_parameters[3].grad()));
  CHECK_FALSE(synced_parameters[0].grad().is_alias_of(synced_parameters[1].grad()));

  for (const double bad : {0.0, -1.0, 2e6}) {
    const std::string message = "GradientAllreduceOptions::bucket_cap_mb must be greater than 0 "
                                "and at most 1e6 (MiB), got " + runhooks::detail::format_number(bad);
    CHECK_THROWS_WITH(runhooks::GradientAllreduceOptions{.bucket_cap_mb = bad}.validate(),
                      doctest::Contains(message.c_str()));
  }
  // The default policy takes no room in a backend ([[no_unique_address]]).
  static_assert(std::is_empty_v<runhooks::NoGradientSync>);
}

namespace {

// An optimizer TorchBackend does not know: its snapshot is the archive serialized on the
// training thread, as before.
struct PlainSGD : torch::optim::SGD {
  using SGD::SGD;
};

template <class Optimizer>
auto toy_options() {
  if constexpr (std::is_same_v<Optimizer, torch::optim::Adam>)
    return torch::optim::AdamOptions(0.01);
  else
    return torch::optim::SGDOptions(0.1).momentum(0.9);  // momentum: optimizer state exists
}

// The toy backend with Optimizer; weight_seed chooses the initial weights.
template <class Optimizer>
runhooks::TorchBackend<Model, Optimizer> make_toy(std::uint64_t weight_seed = 3) {
  torch::set_num_threads(1);
  torch::manual_seed(weight_seed);
  return runhooks::TorchBackend<Model, Optimizer>(
      Model(torch::nn::Linear(features, 16), torch::nn::ReLU(), torch::nn::Linear(16, classes)),
      toy_batches(), toy_options<Optimizer>());
}

template <class B>
std::vector<torch::Tensor> parameters_of(B& backend) {
  std::vector<torch::Tensor> copies;
  for (const torch::Tensor& p : backend.model()->parameters()) copies.push_back(p.detach().clone());
  return copies;
}

// Byte for byte: the same shapes, types and bytes (torch::equal compares values).
bool same_bytes(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const torch::Tensor x = a[i].contiguous(), y = b[i].contiguous();
    if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

// Counts the host tensors libtorch allocates while it is installed (c10's CPU allocator, which
// torch::empty uses), passing each allocation on to the allocator it replaced.
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

}  // namespace

static_assert(runhooks::SnapshottableInPlace<runhooks::TorchBackend<Model, torch::optim::Adam>>);
static_assert(runhooks::SnapshottableInPlace<runhooks::TorchBackend<Model, PlainSGD>>);

TEST_CASE_TEMPLATE("snapshot(into): the state of its step in host tensors it reuses, whatever the "
                   "backend does before the write",
                   Optimizer, torch::optim::SGD, torch::optim::Adam, PlainSGD) {
  TempDir dir;
  auto backend = make_toy<Optimizer>();
  for (int i = 0; i < 10; ++i) backend.run();
  typename decltype(backend)::Snapshot snapshot;
  backend.snapshot(snapshot);
  CHECK(snapshot.global_step() == 10);
  const std::vector<torch::Tensor> at_10 = parameters_of(backend);
  backend.save(dir.path / "saved-10");  // the file save() writes, at the same step
  for (int i = 0; i < 15; ++i) backend.run();  // parameters and optimizer state change in place
  const std::vector<torch::Tensor> at_25 = parameters_of(backend);
  snapshot.write(dir.path / "snapshot-10");

  // Restored into other weights and a fresh optimizer: step 10's parameters, and its optimizer
  // state too, since 15 more steps end where the backend ended, byte for byte.
  auto resumed = make_toy<Optimizer>(99);
  resumed.restore(dir.path / "snapshot-10");
  CHECK(resumed.global_step() == 10);
  CHECK(same_bytes(parameters_of(resumed), at_10));
  for (int i = 0; i < 15; ++i) resumed.run();
  CHECK(same_bytes(parameters_of(resumed), at_25));
  // save()'s file of the same step restores the same backend.
  auto from_save = make_toy<Optimizer>(98);
  from_save.restore(dir.path / "saved-10");
  for (int i = 0; i < 15; ++i) from_save.run();
  CHECK(same_bytes(parameters_of(from_save), at_25));

  SUBCASE("the next snapshot into it allocates no host tensor and holds its own step") {
    int allocations = 0;
    if constexpr (!std::is_same_v<Optimizer, PlainSGD>) {  // PlainSGD's snapshot is bytes
      CountingAllocator counting;
      backend.snapshot(snapshot);
      allocations = counting.allocations.load();
    } else {
      backend.snapshot(snapshot);
    }
    CHECK(allocations == 0);
    CHECK(snapshot.global_step() == 25);
    for (int i = 0; i < 5; ++i) backend.run();
    snapshot.write(dir.path / "snapshot-25");
    auto again = make_toy<Optimizer>(97);
    again.restore(dir.path / "snapshot-25");
    CHECK(again.global_step() == 25);
    CHECK(same_bytes(parameters_of(again), at_25));
  }
}

TEST_CASE_TEMPLATE("an asynchronous save of the hook restores a backend that continues byte for "
                   "byte as the uninterrupted one",
                   Optimizer, torch::optim::SGD, torch::optim::Adam) {
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
  TempDir dir;
  {
    // Saves at 0 (session creation) and 10 and 20 in the background, each written while the
    // next steps train; 25 at the end.
    runhooks::MonitoredSession session{
        make_toy<Optimizer>(), runhooks::StopAtStepHook({.last_step = 25}),
        runhooks::CheckpointSaverHook({.checkpoint_dir = dir.path.string(), .save_steps = 10})};
    while (!session.should_stop()) session.run();
  }
  runhooks::set_log_sink(nullptr);
  auto uninterrupted = make_toy<Optimizer>();
  for (int i = 0; i < 10; ++i) uninterrupted.run();
  const std::vector<torch::Tensor> at_10 = parameters_of(uninterrupted);
  for (int i = 0; i < 45; ++i) uninterrupted.run();

  auto resumed = make_toy<Optimizer>(99);
  resumed.restore(dir.path / "model.ckpt-10");
  CHECK(resumed.global_step() == 10);
  CHECK(same_bytes(parameters_of(resumed), at_10));  // step 10's state, not a later one
  for (int i = 0; i < 45; ++i) resumed.run();
  CHECK(resumed.global_step() == 55);
  CHECK(same_bytes(parameters_of(resumed), parameters_of(uninterrupted)));
}
