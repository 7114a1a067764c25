// What a CheckpointSaverHook is given: CheckpointSaverOptions, checked as they are made (a compile
// error for constexpr options), and what a save does while another is in flight.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <runhooks/detail/checked.hpp>

namespace runhooks {

// What a save does when the previous asynchronous one is still being written.
enum class WhenSaveInFlight {
  wait,  // wait for it, then save (no checkpoint is lost; the step waits)
  skip,  // skip this save with a log line (the step never waits; the next trigger saves)
};

namespace detail {

struct CheckedSaverOptions {};

// The checks of CheckpointSaverOptions, in a constant expression when the options are constexpr:
// a mistake is then a compile error showing the message below; at run time std::invalid_argument.
constexpr CheckedSaverOptions check_saver_options(std::string_view checkpoint_dir,
                                                  const std::optional<std::int64_t>& save_steps,
                                                  const std::optional<double>& save_secs,
                                                  std::string_view basename, int max_to_keep,
                                                  const std::optional<double>& every_n_hours) {
  if (checkpoint_dir.empty()) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::checkpoint_dir must name a directory";
    throw std::invalid_argument(
        "runhooks: CheckpointSaverOptions::checkpoint_dir must name a directory, got ''.");
  }
  // TensorFlow's messages (its SecondOrStepTimer raises them for CheckpointSaverHook).
  if (save_steps && save_secs) {
    if (std::is_constant_evaluated()) throw "Can not provide both every_secs and every_steps. (CheckpointSaverOptions: save_steps and save_secs are both set)";
    throw std::invalid_argument(
        "Can not provide both every_secs and every_steps. (CheckpointSaverOptions: save_steps = " +
        std::to_string(*save_steps) + ", save_secs = " + format_number(*save_secs) + ")");
  }
  if (!save_steps && !save_secs) {
    if (std::is_constant_evaluated()) throw "Either every_secs or every_steps should be provided. (CheckpointSaverOptions: set save_steps or save_secs)";
    throw std::invalid_argument(
        "Either every_secs or every_steps should be provided. (CheckpointSaverOptions: set "
        "save_steps or save_secs)");
  }
  if (save_steps && *save_steps < 1) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::save_steps must be at least 1";
    throw std::invalid_argument("runhooks: CheckpointSaverOptions::save_steps must be at least 1, got " +
                                std::to_string(*save_steps) + ".");
  }
  if (save_secs) checked_secs("CheckpointSaverOptions::save_secs", *save_secs, 0.0, true);
  if (basename.empty() || basename.find('/') != std::string_view::npos ||
      basename.front() == '.' || basename == "checkpoint") {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::basename must be a file name without '/', not starting with '.' and not 'checkpoint'";
    throw std::invalid_argument(
        "runhooks: CheckpointSaverOptions::basename must be a file name without '/', not "
        "starting with '.' and not 'checkpoint', got '" + std::string(basename) + "'.");
  }
  if (max_to_keep < 0) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::max_to_keep must be at least 0";
    throw std::invalid_argument("runhooks: CheckpointSaverOptions::max_to_keep must be at least 0, got " +
                                std::to_string(max_to_keep) + ".");
  }
  if (every_n_hours && !(*every_n_hours > 0.0 && *every_n_hours <= max_duration_secs / 3600.0)) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::keep_checkpoint_every_n_hours must be greater than 0 and at most 277777";
    throw std::invalid_argument(
        "runhooks: CheckpointSaverOptions::keep_checkpoint_every_n_hours must be greater than 0 "
        "and at most 277777, got " + format_number(*every_n_hours) + ".");
  }
  return {};
}

}  // namespace detail

struct CheckpointSaverOptions {
  std::string_view checkpoint_dir{};           // created if missing
  std::optional<std::int64_t> save_steps{};    // exactly one of these two (TensorFlow's rule)
  std::optional<double> save_secs{};
  std::string_view basename = "model.ckpt";    // checkpoints are <checkpoint_dir>/<basename>-<step>
  int max_to_keep = 5;                         // 0 keeps all
  std::optional<double> keep_checkpoint_every_n_hours{};  // unset: TensorFlow's 10000, i.e. never
  bool async_save = true;                      // on a background thread when the backend is Snapshottable
  WhenSaveInFlight when_save_in_flight = WhenSaveInFlight::wait;
  // Checks the fields above as the options are made, so options declared constexpr with a mistake
  // do not compile; at run time a mistake throws std::invalid_argument naming the field and value.
  // Never initialize it yourself.
  [[no_unique_address]] detail::CheckedSaverOptions checked = detail::check_saver_options(
      checkpoint_dir, save_steps, save_secs, basename, max_to_keep, keep_checkpoint_every_n_hours);

  // The same checks again, for options changed after they were made.
  constexpr const CheckpointSaverOptions& validate() const {
    detail::check_saver_options(checkpoint_dir, save_steps, save_secs, basename, max_to_keep,
                                keep_checkpoint_every_n_hours);
    return *this;
  }
};

}  // namespace runhooks
