// TorchBackend: a libtorch classifier trained by mini-batch gradient descent, one optimizer step
// per run(), as a runhooks backend: global step, lazily converted loss and accuracy fetches, and
// checkpoints of model, optimizer, step, torch's CPU random state and the data position (what a
// snapshot copies: torch/detail/state_copy.hpp; the .pt file: torch/detail/archive_file.hpp).
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/torch/detail/archive_checks.hpp>
#include <runhooks/torch/detail/archive_file.hpp>
#include <runhooks/torch/detail/state_copy.hpp>
#include <runhooks/torch/gradient_sync.hpp>
#include <runhooks/torch/step_keys.hpp>
#include <runhooks/torch/tensor_batches.hpp>

namespace runhooks {

// What hooks may fetch from a TorchBackend: the mean loss (BatchLoss, <runhooks/torch/step_keys.hpp>)
// and the fraction of rows classified right, both of the batch the last step trained on (computed
// before its update). Named "loss" and "accuracy" in log lines and summaries (runhooks::key_name).
struct BatchAccuracy : Key<float> {
  static constexpr std::string_view name = "accuracy";
};

// The default loss: cross-entropy of class logits [B, C] against class indices [B].
struct CrossEntropyLoss {
  torch::Tensor operator()(const torch::Tensor& logits, const torch::Tensor& targets) const {
    return torch::nn::functional::cross_entropy(logits, targets);
  }
};

// A backend that trains Model (a torch::nn module holder, e.g. torch::nn::Sequential, whose
// forward(Tensor) returns class logits [B, C]) with Optimizer (e.g. torch::optim::SGD, made here
// from the model's parameters and the extra constructor arguments) on the batches of a
// TensorBatches.
//
//   run():          one step: forward on the step's batch, LossFn, backward, Optimizer::step,
//                   then the global step + 1. The loss and the logits stay tensors; nothing
//                   leaves libtorch's tensors, so a step never waits for a device (on a GPU,
//                   .item() is a synchronization).
//   fetch(BatchLoss), fetch(BatchAccuracy):
//                   convert those tensors with .item(), only when a hook's fetch is switched on
//                   for this step; the accuracy (argmax, compare, mean) is computed only then.
//                   item_calls() counts every .item() the backend made.
//   save(prefix):   one file, prefix + ".pt": a torch archive of the model ("model"), the
//                   optimizer's state ("optimizer"), the global step ("global_step"), torch's CPU
//                   generator state ("rng_state") and the data position ("data_epoch",
//                   "data_offset": where the step's global batch starts; "data_seed",
//                   "data_batch_size": what fixes the order), each as torch::save writes it,
//                   and a CRC-32C of the whole file in the zip's archive comment. Every write is
//                   checked: a full disk or a file-size limit is a CheckpointError naming the
//                   file and the cause. Checkpointable (<runhooks/checkpoint/>): the
//                   checkpoint library stages, fsyncs and commits the file.
//   snapshot(into): copies the model's parameters and buffers, the optimizer's per-parameter
//                   state (SGD, Adam, AdamW, Adagrad, RMSprop) and the global step into the host
//                   tensors of a Snapshot, reusing those of the previous snapshot: a memcpy per
//                   tensor, on the training thread. Its write(prefix), on CheckpointSaverHook's
//                   background thread, serializes them into the same archive save(prefix) writes
//                   (SnapshottableInPlace). The hook keeps one Snapshot, so the state's size stays
//                   allocated in host memory between saves. With another optimizer the snapshot
//                   is the archive serialized on the training thread, as before.
//   snapshot():     a new Snapshot, filled so (SnapshottableByValue: what earlier versions had).
//   restore(prefix): reads that file back into this backend's model and optimizer (same
//                   architecture and optimizer type), its global step and torch's CPU generator.
//                   A missing, torn or corrupt file (one that fails its checksum: any flipped
//                   bit; a CheckpointError naming it), a parameter of another shape or type, an optimizer
//                   state that does not load, or a data position that this backend's
//                   TensorBatches would not reach at that step (another seed, global batch size
//                   or data set size: the error names both values) throws and leaves the backend
//                   as it was. An archive of an earlier version, without "rng_state" and the
//                   data keys, restores the rest and leaves the generator and the check alone;
//                   one without the checksum (before issue 29) restores unchecked, as before.
//                   The whole file is read into memory, checked, and parsed from there.
//
// The batch of a step depends only on the TensorBatches seed and the global step, so a restored
// backend trains on the batches an uninterrupted one would have. Small models train fastest on
// one thread: call torch::set_num_threads(1) (libtorch's OpenMP pool spins on a busy machine).
//
// GradientSync is what happens to the gradients between backward() and the optimizer's step:
// NoGradientSync (the default, nothing: one process) or runhooks::GradientAllreduce<Engine>
// (<runhooks/torch/distributed/gradient_allreduce.hpp>: averaged over the ranks of a
// data-parallel job, as DDP does), given to the constructor that takes it before the optimizer's
// arguments.
template <class Model, class Optimizer, class LossFn = CrossEntropyLoss,
          class GradientSync = NoGradientSync>
class TorchBackend {
 public:
  template <class... OptimizerArgs>
    requires std::is_same_v<GradientSync, NoGradientSync>
  TorchBackend(Model model, TensorBatches batches, OptimizerArgs&&... optimizer_args)
      : model_(std::move(model)),
        optimizer_(std::make_unique<Optimizer>(model_->parameters(),
                                               std::forward<OptimizerArgs>(optimizer_args)...)),
        batches_(std::move(batches)) {
    model_->train();
  }

  // A data-parallel backend: `sync` averages the gradients of every step over the ranks; batches
  // is this rank's shard (TensorBatches::Shard).
  template <class... OptimizerArgs>
    requires(!std::is_same_v<GradientSync, NoGradientSync>)
  TorchBackend(Model model, TensorBatches batches, GradientSync sync,
               OptimizerArgs&&... optimizer_args)
      : model_(std::move(model)),
        optimizer_(std::make_unique<Optimizer>(model_->parameters(),
                                               std::forward<OptimizerArgs>(optimizer_args)...)),
        batches_(std::move(batches)), sync_(std::move(sync)) {
    model_->train();
  }

  void run() {
    auto [inputs, targets] = batches_.batch(global_step_);
    if constexpr (requires { sync_.zero_grad(*optimizer_); })
      sync_.zero_grad(*optimizer_);
    else
      optimizer_->zero_grad();
    torch::Tensor logits = model_->forward(inputs);
    torch::Tensor loss = loss_fn_(logits, targets);
    loss.backward();
    sync_.after_backward(*model_);
    optimizer_->step();
    loss_ = loss.detach();
    logits_ = logits.detach();
    targets_ = std::move(targets);
    ++global_step_;
  }

  std::int64_t global_step() const noexcept { return global_step_; }

  float fetch(BatchLoss) const {
    if (!loss_.defined()) return std::numeric_limits<float>::quiet_NaN();
    return item(loss_);
  }
  float fetch(BatchAccuracy) const {
    if (!logits_.defined()) return std::numeric_limits<float>::quiet_NaN();
    return item(logits_.argmax(1).eq(targets_).to(torch::kFloat).mean());
  }

  // The fraction of `inputs` rows whose predicted class is `targets`, in eval mode, without
  // gradients. One .item().
  float accuracy(const torch::Tensor& inputs, const torch::Tensor& targets) {
    const torch::NoGradGuard no_grad;
    model_->eval();
    struct TrainAgain {
      Model& model;
      ~TrainAgain() { model->train(); }
    } train_again{model_};
    return item(model_->forward(inputs).argmax(1).eq(targets).to(torch::kFloat).mean());
  }

  // The state at one step, in host tensors that the next snapshot(into) reuses; write(prefix)
  // writes what save(prefix) would have written at that step, and touches no backend.
  class Snapshot {
   public:
    Snapshot() = default;

    void write(const std::filesystem::path& prefix) const {
      if constexpr (copies_tensors) {
        torch::serialize::OutputArchive archive;
        torch::serialize::OutputArchive model_archive;
        model_.write(model_archive);
        archive.write("model", model_archive);
        torch::serialize::OutputArchive optimizer_archive;
        optimizer_.save(optimizer_archive);
        archive.write("optimizer", optimizer_archive);
        archive.write("global_step", c10::IValue(global_step_));
        archive.write("rng_state", rng_.state());
        data_.write(archive);
        detail::save_torch_archive(archive, checkpoint_file(prefix));
      } else {
        detail::write_torch_bytes(checkpoint_file(prefix), bytes_);
      }
    }
    std::int64_t global_step() const noexcept { return global_step_; }

   private:
    friend class TorchBackend;
    detail::TorchModuleCopy model_;
    // The optimizer's per-parameter state in host copies (detail::TorchOptimizerCopy).
    detail::TorchOptimizerCopy<Optimizer> optimizer_;
    std::int64_t global_step_ = 0;
    detail::TorchCpuRngCopy rng_;
    detail::TorchDataPosition data_;
    std::string bytes_;  // the serialized archive, for an optimizer whose state is not copied
  };

  void save(const std::filesystem::path& prefix) const {
    torch::serialize::OutputArchive archive;
    fill(archive);
    detail::save_torch_archive(archive, checkpoint_file(prefix));
  }

  void snapshot(Snapshot& into) const {
    into.global_step_ = global_step_;
    if constexpr (copies_tensors) {
      const torch::NoGradGuard no_grad;
      into.rng_.fill();
      into.data_ = detail::TorchDataPosition::at(batches_, global_step_);
      into.model_.fill(*model_);
      into.optimizer_.fill(*optimizer_);
    } else {
      torch::serialize::OutputArchive archive;
      fill(archive);
      into.bytes_ = detail::torch_archive_bytes(archive, "the snapshot of a TorchBackend");
    }
  }

  Snapshot snapshot() const {
    Snapshot made;
    snapshot(made);
    return made;
  }

  void restore(const std::filesystem::path& prefix) {
    const std::string file = checkpoint_file(prefix).string();
    // Everything that can be checked before the backend changes: the file and its checksum, its
    // keys, the model's parameter shapes (Module::load would give a parameter of another shape
    // to the model silently, through Tensor::set_). The file is read once, checked, and parsed
    // from memory, so the bytes checked are the bytes restored.
    const std::string bytes = detail::read_whole_file(file);
    detail::check_torch_archive(bytes, file);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    torch::serialize::InputArchive model_archive, optimizer_archive;
    archive.read("model", model_archive);
    archive.read("optimizer", optimizer_archive);
    c10::IValue step;
    archive.read("global_step", step);
    if (!step.isInt())
      throw std::runtime_error("runhooks::TorchBackend::restore: " + file +
                               ": global_step is not an integer");
    if (step.toInt() < 0)
      throw std::runtime_error("runhooks::TorchBackend::restore: " + file +
                               ": global_step is negative: " + std::to_string(step.toInt()));
    // Written since the archive has them; an earlier version's archive has neither.
    torch::Tensor rng_state;
    if (archive.try_read("rng_state", rng_state) &&
        (rng_state.scalar_type() != torch::kByte || rng_state.dim() != 1))
      throw std::runtime_error("runhooks::TorchBackend::restore: " + file +
                               ": rng_state is not a byte tensor, it is " + detail::describe_tensor(rng_state));
    check_data_position(archive, file, step.toInt());
    detail::check_module_shapes("runhooks::TorchBackend::restore", *model_, model_archive, file, "");
    // The optimizer's state can only be checked by loading it: on a failure, put back what was.
    std::stringstream before;
    {
      torch::serialize::OutputArchive current;
      fill(current);
      current.save_to(before);
    }
    try {
      model_->load(model_archive);
      // Optimizer::load only adds the per-parameter states the archive has: a checkpoint taken
      // before the first step (no momentum yet) would otherwise keep this backend's momentum.
      optimizer_->state().clear();
      optimizer_->load(optimizer_archive);
      if (rng_state.defined()) detail::set_torch_cpu_rng_state(rng_state);
    } catch (...) {
      torch::serialize::InputArchive previous, previous_model, previous_optimizer;
      previous.load_from(before);
      previous.read("model", previous_model);
      previous.read("optimizer", previous_optimizer);
      model_->load(previous_model);
      optimizer_->state().clear();
      optimizer_->load(previous_optimizer);
      throw;
    }
    global_step_ = step.toInt();
    loss_ = logits_ = targets_ = torch::Tensor();
  }

  // The file save(prefix) writes.
  static std::filesystem::path checkpoint_file(const std::filesystem::path& prefix) {
    std::filesystem::path file = prefix;
    file += ".pt";
    return file;
  }

  // The learning rate, for the hooks that read or set it (HasLearningRate: ReduceLROnPlateauHook,
  // LearningRateScheduleHook, LearningRateMonitorHook): the first parameter group's, and set in
  // every group, in the options the optimizer's step reads and its checkpoint archive keeps.
  double learning_rate() const { return optimizer_->param_groups().front().options().get_lr(); }
  void set_learning_rate(double rate) {
    for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups())
      group.options().set_lr(rate);
  }

  // How many tensors this backend converted with .item() (fetches and accuracy()).
  std::int64_t item_calls() const noexcept { return item_calls_; }

  Model& model() noexcept { return model_; }
  Optimizer& optimizer() noexcept { return *optimizer_; }
  TensorBatches& batches() noexcept { return batches_; }
  GradientSync& gradient_sync() noexcept { return sync_; }

 private:
  float item(const torch::Tensor& scalar) const {
    ++item_calls_;
    return scalar.item<float>();
  }

  // Throws unless the archive's data position, when it has one, is where this backend's batches
  // stand at `step`: the same seed and global batch size (the error names both values), and the
  // epoch and offset they give for the step (another data set size otherwise).
  void check_data_position(torch::serialize::InputArchive& archive, const std::string& file,
                           std::int64_t step) const {
    const char* keys[4] = {"data_epoch", "data_offset", "data_seed", "data_batch_size"};
    std::int64_t stored[4] = {};
    int found = 0;
    for (int i = 0; i < 4; ++i) {
      c10::IValue value;
      if (!archive.try_read(keys[i], value)) continue;
      if (!value.isInt())
        throw std::runtime_error("runhooks::TorchBackend::restore: " + file + ": " + keys[i] +
                                 " is not an integer");
      stored[i] = value.toInt();
      ++found;
    }
    if (found == 0) return;  // an archive of an earlier version
    if (found != 4)
      throw std::runtime_error("runhooks::TorchBackend::restore: " + file +
                               " holds only part of the data position (data_epoch, data_offset, "
                               "data_seed, data_batch_size)");
    const detail::TorchDataPosition mine = detail::TorchDataPosition::at(batches_, step);
    const auto mismatch = [&](const std::string& what, const std::string& theirs,
                              const std::string& ours) {
      return std::runtime_error("runhooks::TorchBackend::restore: " + file + " was written with " +
                                what + " " + theirs + ", this backend's TensorBatches has " + ours +
                                ": the resumed run would not train on the batches of the one "
                                "that wrote it");
    };
    if (stored[2] != mine.seed)
      throw mismatch("the data seed", std::to_string(static_cast<std::uint64_t>(stored[2])),
                     std::to_string(static_cast<std::uint64_t>(mine.seed)));
    if (stored[3] != mine.batch_size)
      throw mismatch("the global batch size", std::to_string(stored[3]),
                     std::to_string(mine.batch_size));
    if (stored[0] != mine.epoch || stored[1] != mine.offset)
      throw mismatch("step " + std::to_string(step) + " at", "epoch " + std::to_string(stored[0]) +
                     ", offset " + std::to_string(stored[1]),
                     "epoch " + std::to_string(mine.epoch) + ", offset " +
                         std::to_string(mine.offset) + " (another data set size?)");
  }

  void fill(torch::serialize::OutputArchive& archive) const {
    torch::serialize::OutputArchive model_archive;
    model_->save(model_archive);
    archive.write("model", model_archive);
    torch::serialize::OutputArchive optimizer_archive;
    optimizer_->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("global_step", c10::IValue(global_step_));
    archive.write("rng_state", detail::torch_cpu_rng_state());
    detail::TorchDataPosition::at(batches_, global_step_).write(archive);
  }

  static constexpr bool copies_tensors = detail::TorchOptimizerState<Optimizer>::known;

  Model model_;
  std::unique_ptr<Optimizer> optimizer_;  // holds the model's parameters: made from model_
  TensorBatches batches_;
  [[no_unique_address]] LossFn loss_fn_;
  [[no_unique_address]] GradientSync sync_;
  std::int64_t global_step_ = 0;
  torch::Tensor loss_;     // of the last step's batch, detached; converted only by a fetch
  torch::Tensor logits_;   // of the last step's batch, detached
  torch::Tensor targets_;  // the last step's targets
  mutable std::int64_t item_calls_ = 0;
};

}  // namespace runhooks
