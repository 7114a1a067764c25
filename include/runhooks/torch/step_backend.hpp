// TorchStepBackend: a libtorch model trained by the user's own step function (Lightning's
// training_step), as a runhooks backend: the loop around the step (gradient accumulation, the
// gradient synchronization of data parallelism, clipping, the optimizer's step, a moving average
// of the weights), lazily converted fetches, evaluation, and checkpoints for exact resume.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/torch/detail/archive_checks.hpp>
#include <runhooks/torch/detail/archive_file.hpp>
#include <runhooks/torch/detail/gradient_norm.hpp>
#include <runhooks/torch/detail/state_copy.hpp>
#include <runhooks/torch/detail/step_archive.hpp>
#include <runhooks/torch/detail/weight_average.hpp>
#include <runhooks/torch/gradient_sync.hpp>
#include <runhooks/torch/step_keys.hpp>
#include <runhooks/torch/step_options.hpp>
#include <runhooks/torch/step_output.hpp>

namespace runhooks {

// A step function whose data position a checkpoint keeps: state() returns it as a tensor (any
// dtype and shape, e.g. int64 {epoch, offset}) and restore(tensor), given a CPU tensor, puts it
// back, so that a resumed run draws the batches the uninterrupted one would have. A step that
// draws its batches from torch's generator (nanoGPT's torch.randint) needs none: the generator's
// state is saved.
template <class Step>
concept StatefulStep = requires(Step& step, const Step& cstep, const torch::Tensor& state) {
  { cstep.state() } -> std::convertible_to<torch::Tensor>;
  step.restore(state);
};

namespace detail {
template <class Step, class Model, bool = std::is_invocable_v<Step&, Model&>>
struct step_result {
  using type = void;
};
template <class Step, class Model>
struct step_result<Step, Model, true> {
  using type = std::remove_cvref_t<std::invoke_result_t<Step&, Model&>>;
};
}  // namespace detail

// A backend that trains Model (a torch::nn module holder, e.g. a TORCH_MODULE(GPT)) with the
// user's Optimizer (made by the user over the model's parameters, in parameter groups as they
// wish, and shared with the backend) by calling the user's Step: `step(model)` returns the loss
// of one micro-batch (a scalar torch::Tensor), or a StepOutput<Keys...> with named metrics too.
//
//   run():        one optimizer step: zero the gradients (GradientSync's zero_grad when it has
//                 one), call the step accumulation_steps times, each loss divided by that before
//                 backward(), GradientSync::after_backward once, clip the gradients to
//                 clip_grad_norm, Optimizer::step, update the moving average (ema_decay), then
//                 the global step + 1. Nothing leaves libtorch's tensors: no step waits for a
//                 device unless a hook fetched a value (item_calls() counts the conversions).
//   fetch(BatchLoss), fetch(GradientNorm), fetch(K) for each key of the step's StepOutput:
//                 the last step's value, converted with .item() only when a hook's fetch is on
//                 for the step; NaN before the first step. The gradient norm is the one clipping
//                 computed (as a tensor), or computed only when fetched without clipping.
//   evaluate(fn): fn(model) under NoGradGuard and model->eval(), with the moving average swapped
//                 into the model when there is one; train mode and the weights are back after,
//                 bit for bit, also when fn throws. Returns what fn returns.
//   save(prefix), restore(prefix), snapshot(into): Checkpointable and SnapshottableInPlace, one
//                 file prefix + ".pt" (its CRC-32C and strict restore as TorchBackend's):
//                   "model"            the moving average when there is one (what Lightning's
//                                      WeightAveraging saves as the model's state_dict, so a
//                                      program that loads "model" for inference gets the
//                                      average), else the weights;
//                   "current_model"    the weights, with a moving average only;
//                   "ema_updates"      how many updates the average had (with one only);
//                   "optimizer", "global_step", "rng_state" (torch's CPU generator);
//                   "device_rng_state" the device's generator, on CUDA only;
//                   "step_state"       Step::state(), for a StatefulStep only.
//                 restore() refuses a file whose keys are not those this backend writes (with
//                 an average or without, on CUDA or not, a StatefulStep or not), or whose tensors
//                 have other shapes, naming the file and the difference; on any failure the
//                 backend is left as it was. Tensors are read into the model's own (copied: the
//                 device and the storage stay).
//   learning_rate(), set_learning_rate(rate): HasLearningRate, every parameter group.
//
// On CUDA a snapshot copies into pinned host tensors with non-blocking copies, then waits for
// the device once. Exact resume: a restored backend continues as the uninterrupted one bit for
// bit (weights, optimizer state, average, generators and the step's state), given a
// deterministic step.
template <class Model, class Optimizer, class Step, class GradientSync = NoGradientSync>
class TorchStepBackend {
  static_assert(std::is_base_of_v<torch::optim::Optimizer, Optimizer>,
                "runhooks::TorchStepBackend<Model, Optimizer, Step>: Optimizer must be a "
                "torch::optim optimizer (give the backend a std::shared_ptr<torch::optim::AdamW> "
                "or another one)");
  static_assert(std::is_invocable_v<Step&, Model&>,
                "runhooks::TorchStepBackend: the step function cannot be called with the model: "
                "write it as [&](Model& model) -> torch::Tensor { ...; return loss; }, where Model "
                "is the module holder given to the backend");
  using Result = typename detail::step_result<Step, Model>::type;  // void when not callable
  static_assert(std::is_void_v<Result> || std::is_same_v<Result, torch::Tensor> ||
                    detail::step_output_traits<Result>::is_output,
                "runhooks::TorchStepBackend: the step function must return the loss, a "
                "torch::Tensor, or a runhooks::StepOutput<Keys...>{loss, {metrics...}}");
  // After a failed assertion above, the rest compiles as for a step returning a tensor (and
  // run() does nothing), so that the assertion is the only error.
  static constexpr bool step_fits =
      std::is_same_v<Result, torch::Tensor> || detail::step_output_traits<Result>::is_output;
  using Output = std::conditional_t<step_fits, Result, torch::Tensor>;
  using OutputTraits = detail::step_output_traits<Output>;

 public:
  TorchStepBackend(Model model, std::shared_ptr<Optimizer> optimizer, Step step,
                   TorchStepOptions options = {})
    requires std::is_same_v<GradientSync, NoGradientSync>
      : TorchStepBackend(std::move(model), std::move(optimizer), std::move(step), GradientSync(),
                         std::move(options)) {}

  // A data-parallel backend: `sync` synchronizes the gradients of every step over the ranks
  // (runhooks::GradientAllreduce: averaged, as DDP does); the step draws this rank's data.
  TorchStepBackend(Model model, std::shared_ptr<Optimizer> optimizer, Step step, GradientSync sync,
                   TorchStepOptions options = {})
      : model_(std::move(model)), optimizer_(std::move(optimizer)), step_(std::move(step)),
        sync_(std::move(sync)), options_(options.validate()),
        norm_((check_optimizer(), model_->to(options_.device),
               detail::unique_tensors(model_->parameters()))) {
    if (options_.ema_decay) average_.emplace(*model_, *options_.ema_decay);
    model_->train();
  }

  void run() {
    if constexpr (step_fits) run_step();
  }

  std::int64_t global_step() const noexcept { return global_step_; }

  float fetch(BatchLoss) const {
    if (!stepped_) return std::numeric_limits<float>::quiet_NaN();
    return item<float>(loss_);
  }
  float fetch(GradientNorm) const {
    if (!stepped_) return std::numeric_limits<float>::quiet_NaN();
    if (options_.clip_grad_norm) return item<float>(gradient_norm_);
    return item<float>(norm_.total());
  }
  template <class K>
    requires(OutputTraits::template has<K>)
  typename K::value_type fetch(K) const {
    if (!stepped_) return std::numeric_limits<typename K::value_type>::quiet_NaN();
    return item<typename K::value_type>(metrics_[OutputTraits::template index<K>()]);
  }

  template <class Fn>
    requires std::invocable<Fn&, Model&>
  decltype(auto) evaluate(Fn&& fn) {
    const torch::NoGradGuard no_grad;
    struct TrainAgain {
      TorchStepBackend& self;
      bool swapped = false;
      ~TrainAgain() {
        if (swapped) self.average_->swap_out();
        self.model_->train();
      }
    } train_again{*this};
    model_->eval();
    if (average_) {
      average_->swap_in();
      train_again.swapped = true;
    }
    return fn(model_);
  }

  // The moving average copied into the model for good (Lightning's WeightAveraging does this at
  // the end of training): for a model used after training. Nothing without an average.
  void copy_average_to_model() {
    if (average_) average_->copy_to_module();
  }

  // The state at one step, in host tensors that the next snapshot(into) reuses; write(prefix)
  // writes what save(prefix) would have written at that step, and touches no backend.
  class Snapshot {
   public:
    Snapshot() = default;

    void write(const std::filesystem::path& prefix) const {
      if constexpr (copies_tensors) {
        torch::serialize::OutputArchive archive;
        detail::write_step_archive(
            archive, average_,
            [&](torch::serialize::OutputArchive& into) { model_.write(into); },
            [&](torch::serialize::OutputArchive& into) { average_model_.write(into); },
            [&](torch::serialize::OutputArchive& into) { optimizer_.save(into); }, global_step_,
            ema_updates_, rng_.state(), device_rng_, step_state_);
        detail::save_torch_archive(archive, checkpoint_file(prefix));
      } else {
        detail::write_torch_bytes(checkpoint_file(prefix), bytes_);
      }
    }
    std::int64_t global_step() const noexcept { return global_step_; }

   private:
    friend class TorchStepBackend;
    detail::TorchModuleCopy model_;          // the weights
    detail::TorchModuleCopy average_model_;  // the moving average, in the model's layout
    detail::TorchOptimizerCopy<Optimizer> optimizer_;
    std::int64_t global_step_ = 0;
    bool average_ = false;
    std::int64_t ema_updates_ = 0;
    detail::TorchCpuRngCopy rng_;
    torch::Tensor device_rng_;
    torch::Tensor step_state_;
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
      if (!options_.device.is_cpu())
        into.device_rng_ = detail::torch_device_rng_state(options_.device);
      if constexpr (StatefulStep<Step>)
        into.step_state_ =
            detail::copy_to_host(torch::Tensor(step_.state()), std::move(into.step_state_));
      into.model_.fill(*model_);
      into.average_ = average_.has_value();
      if (average_) {
        into.ema_updates_ = average_->updates();
        into.average_model_.fill(
            *model_, [this](const torch::Tensor& tensor) -> const torch::Tensor& {
              return average_->of(tensor);
            });
      }
      into.optimizer_.fill(*optimizer_);
      detail::sync_device_copies(options_.device);
    } else {
      torch::serialize::OutputArchive archive;
      fill(archive);
      into.bytes_ = detail::torch_archive_bytes(archive, "the snapshot of a TorchStepBackend");
    }
  }

  Snapshot snapshot() const {
    Snapshot made;
    snapshot(made);
    return made;
  }

  void restore(const std::filesystem::path& prefix) {
    const std::string file = checkpoint_file(prefix).string();
    const std::string bytes = detail::read_whole_file(file);
    detail::check_torch_archive(bytes, file);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size(), options_.device);
    Parts parts = read_parts(archive, file);
    // Everything is checked; loading can still fail (an optimizer state of another type): then
    // the state before is put back.
    torch::serialize::OutputArchive current;
    fill(current);
    const std::string before = detail::torch_archive_bytes(current, file);
    try {
      load(parts);
    } catch (...) {
      torch::serialize::InputArchive previous;
      previous.load_from(before.data(), before.size(), options_.device);
      Parts old = read_parts(previous, file);
      load(old);
      throw;
    }
  }

  // The file save(prefix) writes.
  static std::filesystem::path checkpoint_file(const std::filesystem::path& prefix) {
    std::filesystem::path file = prefix;
    file += ".pt";
    return file;
  }

  // The learning rate, for the hooks that read or set it (HasLearningRate): the first parameter
  // group's, and set in every group, in the options the optimizer's step reads and its
  // checkpoint archive keeps.
  double learning_rate() const { return optimizer_->param_groups().front().options().get_lr(); }
  void set_learning_rate(double rate) {
    for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups())
      group.options().set_lr(rate);
  }

  // How many tensors this backend converted with .item() (its fetches).
  std::int64_t item_calls() const noexcept { return item_calls_; }
  // How many times the moving average was updated (0 without one).
  std::int64_t ema_updates() const noexcept { return average_ ? average_->updates() : 0; }

  Model& model() noexcept { return model_; }
  Optimizer& optimizer() noexcept { return *optimizer_; }
  Step& step() noexcept { return step_; }
  GradientSync& gradient_sync() noexcept { return sync_; }
  const TorchStepOptions& options() const noexcept { return options_; }
  // The average of one of the model's tensors (nullopt without a moving average).
  std::optional<torch::Tensor> average_of(const torch::Tensor& tensor) const {
    if (!average_) return std::nullopt;
    return average_->of(tensor);
  }

 private:
  static constexpr const char* who = "runhooks::TorchStepBackend::restore";
  using Parts = detail::TorchStepArchiveParts;
  static constexpr bool copies_tensors = detail::TorchOptimizerState<Optimizer>::known;

  void run_step() {
    if constexpr (requires { sync_.zero_grad(*optimizer_); })
      sync_.zero_grad(*optimizer_);
    else
      optimizer_->zero_grad();
    const std::int64_t n = options_.accumulation_steps;
    for (std::int64_t i = 0; i < n; ++i) {
      Output out = step_(model_);
      torch::Tensor& loss = loss_of(out);
      check_loss(loss);
      if (n == 1) {
        loss.backward();
        loss_ = loss.detach();
        if constexpr (OutputTraits::is_output)
          for (std::size_t k = 0; k < OutputTraits::size; ++k)
            metrics_[k] = out.metrics[k].detach();
      } else {
        (loss / static_cast<double>(n)).backward();
        loss_ = i == 0 ? loss.detach() : loss_ + loss.detach();
        if constexpr (OutputTraits::is_output)
          for (std::size_t k = 0; k < OutputTraits::size; ++k)
            metrics_[k] = i == 0 ? out.metrics[k].detach() : metrics_[k] + out.metrics[k].detach();
      }
    }
    if (n > 1) {
      loss_ = loss_ / static_cast<double>(n);
      if constexpr (OutputTraits::is_output)
        for (torch::Tensor& metric : metrics_) metric = metric / static_cast<double>(n);
    }
    sync_.after_backward(*model_);
    if (options_.clip_grad_norm) gradient_norm_ = norm_.clip(*options_.clip_grad_norm);
    optimizer_->step();
    ++global_step_;
    if (average_) {
      const std::int64_t index = global_step_ - 1;  // Lightning's step_idx
      if (index >= options_.ema_start_step && index % options_.ema_every_n_steps == 0)
        average_->update();
    }
    stepped_ = true;
  }

  void check_optimizer() const {
    if (!optimizer_)
      throw std::invalid_argument("runhooks::TorchStepBackend: the optimizer is a null pointer");
  }

  static torch::Tensor& loss_of(Output& out) {
    if constexpr (OutputTraits::is_output)
      return out.loss;
    else
      return out;
  }
  static void check_loss(const torch::Tensor& loss) {
    if (!loss.defined() || loss.numel() != 1 || !loss.requires_grad())
      throw std::invalid_argument(
          "runhooks::TorchStepBackend: the step function returned " +
          (loss.defined() ? "a loss " + detail::describe_tensor(loss) +
                                (loss.requires_grad() ? "" : " that does not require grad")
                          : std::string("an undefined tensor")) +
          "; it must return the loss to back-propagate, a scalar tensor computed from the "
          "model's parameters (not under NoGradGuard, not detached)");
  }

  template <class T>
  T item(const torch::Tensor& scalar) const {
    ++item_calls_;
    return scalar.item<T>();
  }

  void fill(torch::serialize::OutputArchive& archive) const {
    torch::Tensor step_state;
    if constexpr (StatefulStep<Step>) step_state = torch::Tensor(step_.state());
    detail::write_step_archive(
        archive, average_.has_value(),
        [&](torch::serialize::OutputArchive& into) { model_->save(into); },
        [&](torch::serialize::OutputArchive& into) { average_->write(*model_, into); },
        [&](torch::serialize::OutputArchive& into) { optimizer_->save(into); }, global_step_,
        ema_updates(), detail::torch_cpu_rng_state(),
        options_.device.is_cpu() ? torch::Tensor()
                                 : detail::torch_device_rng_state(options_.device),
        step_state);
  }

  Parts read_parts(torch::serialize::InputArchive& archive, const std::string& file) const {
    return detail::read_step_archive(who, archive, file, *model_, average_.has_value(),
                                     options_.device, StatefulStep<Step>);
  }

  void load(Parts& parts) {
    detail::read_module_in_place(*model_, parts.model);
    if (average_) {
      average_->read(*model_, parts.average);
      average_->set_updates(parts.ema_updates);
    }
    // Optimizer::load only adds the per-parameter states the archive has: a checkpoint taken
    // before the first step (no moments yet) would otherwise keep this backend's.
    optimizer_->state().clear();
    optimizer_->load(parts.optimizer);
    detail::set_torch_cpu_rng_state(parts.rng_state.cpu());
    if (parts.device_rng_state.defined())
      detail::set_torch_device_rng_state(options_.device, parts.device_rng_state.cpu());
    if constexpr (StatefulStep<Step>) step_.restore(parts.step_state.cpu());
    global_step_ = parts.global_step;
    stepped_ = false;
    loss_ = gradient_norm_ = torch::Tensor();
    for (torch::Tensor& metric : metrics_) metric = torch::Tensor();
  }

  Model model_;
  std::shared_ptr<Optimizer> optimizer_;
  Step step_;
  [[no_unique_address]] GradientSync sync_;
  TorchStepOptions options_;
  detail::TorchGradientNorm norm_;  // the model's parameters, each once
  std::optional<detail::TorchWeightAverage> average_;
  std::int64_t global_step_ = 0;
  bool stepped_ = false;  // a step ran since construction or restore: the fetches have values
  torch::Tensor loss_;    // of the last step, detached; converted only by a fetch
  torch::Tensor gradient_norm_;  // before clipping, when clipping
  std::array<torch::Tensor, OutputTraits::size> metrics_;
  mutable std::int64_t item_calls_ = 0;
};

// Deduced from the constructor's arguments: TorchStepBackend backend{model, optimizer, step,
// options} with a std::shared_ptr<Optimizer>, and {model, optimizer, step, sync, options}.
template <class Model, class Optimizer, class Step>
TorchStepBackend(Model, std::shared_ptr<Optimizer>, Step, TorchStepOptions = {})
    -> TorchStepBackend<Model, Optimizer, Step>;
template <class Model, class Optimizer, class Step, class GradientSync>
  requires(!std::is_same_v<GradientSync, TorchStepOptions>)
TorchStepBackend(Model, std::shared_ptr<Optimizer>, Step, GradientSync, TorchStepOptions = {})
    -> TorchStepBackend<Model, Optimizer, Step, GradientSync>;

}  // namespace runhooks
