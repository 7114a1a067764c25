// What the torch backends' restore() checks in an archive before it changes anything: the
// parameters' shapes and types, the global step, the generator state; errors name the backend's
// function and the file.
#pragma once

#include <runhooks/detail/config.hpp>

#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace runhooks::detail {

// "Float[16, 8]".
inline std::string describe_tensor(const torch::Tensor& tensor) {
  std::string text = c10::toString(tensor.scalar_type());
  text += '[';
  for (std::size_t i = 0; i < tensor.sizes().size(); ++i)
    text += (i > 0 ? ", " : "") + std::to_string(tensor.sizes()[i]);
  return text + ']';
}

// Throws unless every parameter and buffer of `module` is in `archive` (written by Module::save or
// TorchModuleCopy::write) with its shape and type. `who` opens each message
// ("runhooks::TorchBackend::restore"), `path` is the module's place in the model ("" at the top).
inline void check_module_shapes(const char* who, const torch::nn::Module& module,
                                torch::serialize::InputArchive& archive, const std::string& file,
                                const std::string& path) {
  const auto check = [&](const std::string& name, const torch::Tensor& mine, bool is_buffer) {
    torch::Tensor stored;
    if (!archive.try_read(name, stored, is_buffer))
      throw std::runtime_error(std::string(who) + ": " + file + " has no " + path + name);
    if (stored.sizes() != mine.sizes() || stored.scalar_type() != mine.scalar_type())
      throw std::runtime_error(std::string(who) + ": " + file + " holds " + path + name + " as " +
                               describe_tensor(stored) + ", the model has " +
                               describe_tensor(mine) + " (another architecture?)");
  };
  for (const auto& item : module.named_parameters(/*recurse=*/false))
    check(item.key(), item.value(), false);
  for (const auto& item : module.named_buffers(/*recurse=*/false))
    check(item.key(), item.value(), true);
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive))
      throw std::runtime_error(std::string(who) + ": " + file + " has no module " + path +
                               child.key());
    check_module_shapes(who, *child.value(), child_archive, file, path + child.key() + ".");
  }
}

// The archive's "global_step": an integer, at least 0.
inline std::int64_t read_global_step(const char* who, torch::serialize::InputArchive& archive,
                                     const std::string& file) {
  c10::IValue step;
  archive.read("global_step", step);
  if (!step.isInt())
    throw std::runtime_error(std::string(who) + ": " + file + ": global_step is not an integer");
  if (step.toInt() < 0)
    throw std::runtime_error(std::string(who) + ": " + file +
                             ": global_step is negative: " + std::to_string(step.toInt()));
  return step.toInt();
}

// A generator's state under `key`, a 1-D byte tensor; undefined when the archive has none and
// `required` is false (an archive of an earlier version).
inline torch::Tensor read_rng_state(const char* who, torch::serialize::InputArchive& archive,
                                    const std::string& file, const char* key, bool required) {
  torch::Tensor state;
  if (!archive.try_read(key, state)) {
    if (required)
      throw std::runtime_error(std::string(who) + ": " + file + " has no " + key);
    return {};
  }
  if (state.scalar_type() != torch::kByte || state.dim() != 1)
    throw std::runtime_error(std::string(who) + ": " + file + ": " + key +
                             " is not a byte tensor, it is " + describe_tensor(state));
  return state;
}

}  // namespace runhooks::detail
