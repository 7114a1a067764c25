// expect: write_the_options_type<
// expect: TrainingSessionOptions::is_chief, &
// expect: TrainingSessionOptions::checkpoint_dir, &
// expect: TrainingSessionOptions::save_checkpoint_secs, &
// expect: TrainingSessionOptions::save_checkpoint_steps, &
// expect: TrainingSessionOptions::save_summaries_steps, &
// expect: TrainingSessionOptions::save_summaries_secs, &
// expect: TrainingSessionOptions::log_step_count_steps, &
// expect: TrainingSessionOptions::step_rate_log_line, &
// expect: TrainingSessionOptions::step_rate_chart, &
// expect: TrainingSessionOptions::summary_dir, &
// expect: TrainingSessionOptions::stop_grace_period_secs, &
// expect: TrainingSessionOptions::max_wait_secs, &
// expect: TrainingSessionOptions::stop_on_signals, &
// expect: TrainingSessionOptions::checked>
// expect: Misspelt field? Write TrainingSessionOptions{...} to see which
// first-error: deleted
// max-lines: 16
// Issue 30: braced options with a misspelt field fit no overload of make_training_session, and
// the compiler said only "no matching function ... cannot convert '{dir, 50, 10}'". The deleted
// catch-all overload names TrainingSessionOptions and its fields and says what to write to have
// the field named (training_session_options_misspelt_field.cpp).
// GCC names the options type without its namespace here and Clang with it: each field is
// checked in the form both print. Clang's output is 16 lines (the deleted overload's note,
// the two not viable, and a second error: an initializer list cannot go to the C variadic
// catch-all), GCC's 12.
#include <cstdint>
#include <string>

#include <runhooks/training_session.hpp>

struct Trainer {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
};

int main() {
  const std::string dir = "ckpt";
  auto session = runhooks::make_training_session(
      {.checkpoint_dir = dir, .save_checkpoints_steps = 50, .log_step_count_steps = 10},
      [] { return Trainer{}; });
}
