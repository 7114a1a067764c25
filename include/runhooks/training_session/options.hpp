// TrainingSessionOptions: make_training_session's arguments (TensorFlow's MonitoredTrainingSession
// arguments), their checks, the chief's Role, and what TensorFlow's USE_DEFAULT resolves them to.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include <runhooks/detail/checked.hpp>

namespace runhooks {

namespace detail {

struct CheckedTrainingOptions {};

// The checks of TrainingSessionOptions, run as the options are made: options declared constexpr
// with a mistake do not compile (the message below shows in the error); at run time a mistake
// is std::invalid_argument naming the option and value.
constexpr CheckedTrainingOptions check_training_options(
    const std::optional<double>& save_checkpoint_secs,
    const std::optional<std::int64_t>& save_checkpoint_steps,
    const std::optional<std::int64_t>& save_summaries_steps,
    const std::optional<double>& save_summaries_secs, std::int64_t log_step_count_steps,
    double stop_grace_period_secs, double max_wait_secs) {
  // TensorFlow's documentation says save_checkpoint_secs wins when both are given; its code
  // passes both to CheckpointSaverHook, whose timer then raises. Both is a mistake here.
  if (save_checkpoint_secs && save_checkpoint_steps) {
    if (std::is_constant_evaluated()) throw "runhooks: TrainingSessionOptions sets both save_checkpoint_secs and save_checkpoint_steps; set one (TensorFlow's documentation and code disagree on what both mean)";
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions sets both save_checkpoint_secs (" +
        format_number(*save_checkpoint_secs) + ") and save_checkpoint_steps (" +
        std::to_string(*save_checkpoint_steps) +
        "); set one (TensorFlow's documentation and code disagree on what both mean).");
  }
  if (save_summaries_steps && save_summaries_secs) {
    if (std::is_constant_evaluated()) throw "runhooks: TrainingSessionOptions sets both save_summaries_steps and save_summaries_secs; set one";
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions sets both save_summaries_steps (" +
        std::to_string(*save_summaries_steps) + ") and save_summaries_secs (" +
        format_number(*save_summaries_secs) + "); set one.");
  }
  // 0 switches a default hook off, as in TensorFlow; below 0 is a mistake.
  if ((save_checkpoint_steps && *save_checkpoint_steps < 0) ||
      (save_summaries_steps && *save_summaries_steps < 0) || log_step_count_steps < 0) {
    if (std::is_constant_evaluated()) throw "runhooks: TrainingSessionOptions: save_checkpoint_steps, save_summaries_steps and log_step_count_steps must be at least 0 (0: off)";
    throw std::invalid_argument(
        "runhooks: TrainingSessionOptions: save_checkpoint_steps, save_summaries_steps and "
        "log_step_count_steps must be at least 0 (0: off), got " +
        std::to_string(save_checkpoint_steps.value_or(0)) + ", " +
        std::to_string(save_summaries_steps.value_or(0)) + ", " +
        std::to_string(log_step_count_steps) + ".");
  }
  if (save_checkpoint_secs)
    checked_secs("TrainingSessionOptions::save_checkpoint_secs", *save_checkpoint_secs);
  if (save_summaries_secs)
    checked_secs("TrainingSessionOptions::save_summaries_secs", *save_summaries_secs);
  checked_secs("TrainingSessionOptions::stop_grace_period_secs", stop_grace_period_secs);
  checked_secs("TrainingSessionOptions::max_wait_secs", max_wait_secs);
  return {};
}

}  // namespace detail

// TensorFlow's MonitoredTrainingSession arguments. Unset optionals are TensorFlow's USE_DEFAULT:
// with neither checkpoint option set, a checkpoint every 600 s; with neither summary option,
// summaries every 100 steps; a value of 0 switches that hook off.
struct TrainingSessionOptions {
  // The chief saves checkpoints and summaries and runs the chief-only hooks; workers restore the
  // chief's checkpoints. make_training_session<Role::chief> or <Role::worker> fixes it at compile
  // time instead.
  bool is_chief = true;
  std::string_view checkpoint_dir{};  // restore from and save to; empty: no checkpoints
  std::optional<double> save_checkpoint_secs{};
  std::optional<std::int64_t> save_checkpoint_steps{};
  std::optional<std::int64_t> save_summaries_steps{};
  std::optional<double> save_summaries_secs{};
  std::int64_t log_step_count_steps = 100;  // StepCounterHook; 0: none
  // What the StepCounterHook does with each global_step/sec it measures, chosen apart (both,
  // TensorFlow's, by default; neither is log_step_count_steps = 0): a log line, and a point of
  // the global_step/sec chart in summary_dir's event file.
  bool step_rate_log_line = true;
  bool step_rate_chart = true;
  std::string_view summary_dir{};          // empty: checkpoint_dir
  double stop_grace_period_secs = 120.0;   // see MonitoredSession::set_stop_grace_period_secs
  double max_wait_secs = 7200.0;           // how long a worker waits for the chief's checkpoint
  bool stop_on_signals = true;             // SignalStopHook: SIGINT/SIGTERM end the loop cleanly
  // Checks the fields above as the options are made (never set it yourself).
  [[no_unique_address]] detail::CheckedTrainingOptions checked = detail::check_training_options(
      save_checkpoint_secs, save_checkpoint_steps, save_summaries_steps, save_summaries_secs,
      log_step_count_steps, stop_grace_period_secs, max_wait_secs);

  // The same checks, for options changed after they were made.
  constexpr const TrainingSessionOptions& validate() const {
    detail::check_training_options(save_checkpoint_secs, save_checkpoint_steps,
                                   save_summaries_steps, save_summaries_secs, log_step_count_steps,
                                   stop_grace_period_secs, max_wait_secs);
    return *this;
  }
};

// Whether a session is the chief: decided at run time (TrainingSessionOptions::is_chief; every
// chief-only hook point costs one predictable branch) or at compile time (no cost: a worker's
// session type has no chief-only hook at all).
enum class Role { runtime, chief, worker };

namespace detail {

// What TensorFlow's USE_DEFAULT resolves to.
struct ResolvedTrainingOptions {
  std::filesystem::path checkpoint_dir, summary_dir;
  std::optional<double> checkpoint_secs;
  std::optional<std::int64_t> checkpoint_steps;
  std::optional<std::int64_t> summary_steps;
  std::optional<double> summary_secs;
  bool checkpoints = false, summaries = false, step_counter = false;
};

inline ResolvedTrainingOptions resolve(const TrainingSessionOptions& o, bool is_chief) {
  ResolvedTrainingOptions r;
  r.checkpoint_dir = std::filesystem::path(o.checkpoint_dir);
  r.summary_dir = o.summary_dir.empty() ? r.checkpoint_dir : std::filesystem::path(o.summary_dir);
  r.summary_steps = o.save_summaries_steps;
  r.summary_secs = o.save_summaries_secs;
  if (!r.summary_steps && !r.summary_secs) r.summary_steps = 100;
  r.checkpoint_secs = o.save_checkpoint_secs;
  r.checkpoint_steps = o.save_checkpoint_steps;
  if (!r.checkpoint_secs && !r.checkpoint_steps) r.checkpoint_secs = 600.0;
  if (!is_chief) return r;  // a worker has no default hooks
  const bool has_summary_dir = !r.summary_dir.empty();
  r.step_counter = has_summary_dir && o.log_step_count_steps > 0 &&
                   (o.step_rate_log_line || o.step_rate_chart);
  r.summaries = has_summary_dir && (r.summary_steps.value_or(0) > 0 || r.summary_secs.value_or(0.0) > 0.0);
  r.checkpoints = !r.checkpoint_dir.empty() &&
                  (r.checkpoint_steps.value_or(0) > 0 || r.checkpoint_secs.value_or(0.0) > 0.0);
  // A period of 0 is "off"; the hook that stays on gets the other one only.
  if (r.summary_steps == 0) r.summary_steps.reset();
  if (r.summary_secs == 0.0) r.summary_secs.reset();
  if (r.checkpoint_steps == 0) r.checkpoint_steps.reset();
  if (r.checkpoint_secs == 0.0) r.checkpoint_secs.reset();
  return r;
}

}  // namespace detail

}  // namespace runhooks
