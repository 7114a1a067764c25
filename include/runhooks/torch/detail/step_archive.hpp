// The archive of a TorchStepBackend: its layout (which keys, in which order, for a backend with or
// without a moving average, on the CPU or a device, with a stateful step or not), written by
// save() and by a snapshot alike, and read back with every check made before anything changes.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <runhooks/torch/detail/archive_checks.hpp>

namespace runhooks::detail {

// The archive's layout, written by save() and by a snapshot alike: the keys in this order, each
// writer filling its sub-archive (the averaged model's only when `average`); an undefined tensor
// leaves its key out.
template <class WriteModel, class WriteAverage, class WriteOptimizer>
void write_step_archive(torch::serialize::OutputArchive& archive, bool average,
                        WriteModel&& write_model, WriteAverage&& write_average,
                        WriteOptimizer&& write_optimizer, std::int64_t global_step,
                        std::int64_t ema_updates, const torch::Tensor& rng_state,
                        const torch::Tensor& device_rng_state, const torch::Tensor& step_state) {
  torch::serialize::OutputArchive model_archive, current_archive, optimizer_archive;
  if (average) {
    write_average(model_archive);
    archive.write("model", model_archive);
    write_model(current_archive);
    archive.write("current_model", current_archive);
    archive.write("ema_updates", c10::IValue(ema_updates));
  } else {
    write_model(model_archive);
    archive.write("model", model_archive);
  }
  write_optimizer(optimizer_archive);
  archive.write("optimizer", optimizer_archive);
  archive.write("global_step", c10::IValue(global_step));
  archive.write("rng_state", rng_state);
  if (device_rng_state.defined()) archive.write("device_rng_state", device_rng_state);
  if (step_state.defined()) archive.write("step_state", step_state);
}

// What restore() reads, all checked before anything changes.
struct TorchStepArchiveParts {
  torch::serialize::InputArchive model, average, optimizer;
  std::int64_t global_step = 0, ema_updates = 0;
  torch::Tensor rng_state, device_rng_state, step_state;
};

// Reads and checks the parts of a TorchStepBackend's archive for a backend with `model`, an
// average or not, on `device`, with a stateful step or not: throws naming `who` and `file` when a
// key is missing or one this backend would not write is there, or a tensor has another shape.
inline TorchStepArchiveParts read_step_archive(const char* who,
                                               torch::serialize::InputArchive& archive,
                                               const std::string& file,
                                               const torch::nn::Module& model, bool average,
                                               const torch::Device& device, bool stateful_step) {
  TorchStepArchiveParts parts;
  torch::serialize::InputArchive first;
  if (!archive.try_read("model", first))
    throw std::runtime_error(std::string(who) + ": " + file + " has no model");
  torch::serialize::InputArchive current;
  const bool has_current = archive.try_read("current_model", current);
  if (average && !has_current)
    throw std::runtime_error(std::string(who) + ": " + file +
                             " was written without a moving average (no current_model), and "
                             "this backend keeps one (TorchStepOptions::ema_decay)");
  if (!average && has_current)
    throw std::runtime_error(std::string(who) + ": " + file +
                             " was written with a moving average (its model is the average, "
                             "current_model the weights), and this backend keeps none: set "
                             "TorchStepOptions::ema_decay to resume it");
  if (average) {
    parts.model = std::move(current);
    parts.average = std::move(first);
    c10::IValue updates;
    if (!archive.try_read("ema_updates", updates) || !updates.isInt() || updates.toInt() < 0)
      throw std::runtime_error(std::string(who) + ": " + file +
                               " has no ema_updates, a count at least 0");
    parts.ema_updates = updates.toInt();
    detail::check_module_shapes(who, model, parts.average, file, "");
  } else {
    parts.model = std::move(first);
  }
  detail::check_module_shapes(who, model, parts.model, file, "");
  if (!archive.try_read("optimizer", parts.optimizer))
    throw std::runtime_error(std::string(who) + ": " + file + " has no optimizer");
  parts.global_step = detail::read_global_step(who, archive, file);
  parts.rng_state = detail::read_rng_state(who, archive, file, "rng_state", true);
  const bool on_device = !device.is_cpu();
  torch::Tensor device_rng = detail::read_rng_state(who, archive, file, "device_rng_state", false);
  if (on_device != device_rng.defined())
    throw std::runtime_error(std::string(who) + ": " + file +
                             (on_device ? " has no device_rng_state, and this backend trains on " +
                                              device.str()
                                        : std::string(" holds a device_rng_state (written on a "
                                                      "GPU), and this backend trains on the CPU")));
  parts.device_rng_state = device_rng;
  torch::Tensor step_state;
  const bool has_step_state = archive.try_read("step_state", step_state);
  if (stateful_step != has_step_state)
    throw std::runtime_error(
        std::string(who) + ": " + file +
        (has_step_state ? " holds a step_state, and this backend's step has no state() and "
                          "restore(): the data position would be lost"
                        : " has no step_state, and this backend's step keeps one (state(), "
                          "restore())"));
  parts.step_state = step_state;
  return parts;
}

}  // namespace runhooks::detail
