// SummaryOutput: StepCounterHook's rates as TensorBoard scalars, as TensorFlow's output_dir.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include <runhooks/detail/config.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/summary/detail/event_encoding.hpp>
#include <runhooks/summary/event_file_writer.hpp>
#include <runhooks/summary/event_writer_cache.hpp>

namespace runhooks {

// What TensorFlow's StepCounterHook does with an output_dir: the log line, and a scalar in a
// TensorBoard event file under output_dir:
//   runhooks::StepCounterHook({.every_n_steps = 100}, runhooks::SummaryOutput("logs"))
// A scalar costs the training thread a record in memory (bench/summary_record.cpp); it is in the
// file within the writer's flush_secs (2 s by default; `writer_options` may ask for a shorter
// one, EventFileWriterCache::get), at flush(), or when the last holder of the file lets go.
// The event file is the directory's one (EventFileWriterCache): a SummarySaverHook or a
// CheckpointSaverHook writing to the same directory in this process writes to the same file,
// as TensorFlow's hooks share a FileWriter. The first run of a session writes SessionLog START
// at its global step, unless another hook sharing the file wrote it for this session already.
// Differs from TensorFlow: TF's StepCounterHook writes no START, so after a resume TensorBoard
// shows both runs' rates for the steps between the checkpoint and the crash.
// The file is the directory's writer from EventFileWriterCache, taken at open() (the hook's
// begin(), where TensorFlow's StepCounterHook takes its writer) or at the first record, not at
// construction: a hook that never begins makes no file (ChiefOnly's hook on the other ranks of a
// job writes nothing into the chief's directory). Bad writer_options throw from the constructor.
// I/O failures follow EventFileWriter's rule, which is CsvOutput's
// (<runhooks/summary/event_writer.hpp>): a directory or file that cannot be created throws from
// open(); the first failure to write logs one warning with the path and the cause, later scalars
// are dropped, and error() tells what happened.
class SummaryOutput {
 public:
  explicit SummaryOutput(const std::filesystem::path& output_dir, bool log_line = true,
                         std::optional<EventFileWriterOptions> writer_options = {})
      : output_dir_(output_dir), writer_options_(writer_options), log_line_(log_line) {
    if (writer_options_) writer_options_->validate();
  }

  // StepCounterHook's begin(): a session begins. A tag that is not UTF-8 throws here, before
  // the first step, rather than at the first record (EventFileWriter::add_scalar's rule).
  void open(const StepCounterOptions& options) {
    detail::check_summary_tag("SummaryOutput, StepCounterOptions::tag", options.tag);
    file().begin_session();
    started_ = false;
  }
  // StepCounterHook's first run of the session, at the global step after it.
  void start(std::int64_t global_step) {
    if (started_) return;
    started_ = true;
    file().add_session_start(global_step);
  }

  void record(std::string_view tag, double steps_per_sec, std::int64_t global_step) {
    if (log_line_) LogOutput{}.record(tag, steps_per_sec, global_step);
    file().add_scalar(tag, static_cast<float>(steps_per_sec), global_step);
  }

  // Writes the scalars waiting to the file now.
  void flush() {
    if (writer_) writer_->flush();
  }

  // The writer's first write failure, or an empty code: see EventFileWriter::error().
  std::error_code error() const { return writer_ ? writer_->error() : std::error_code{}; }

  // The directory's shared writer, taken now if open() has not yet (do not close() it: the other
  // hooks write there too).
  EventFileWriter& writer() { return file(); }
  // The settings, as given.
  const std::filesystem::path& output_dir() const noexcept { return output_dir_; }
  bool log_line() const noexcept { return log_line_; }

 private:
  EventFileWriter& file() {
    if (!writer_) writer_ = EventFileWriterCache::get(output_dir_, writer_options_);
    return *writer_;
  }

  std::shared_ptr<EventFileWriter> writer_;  // none until open() or the first record
  std::filesystem::path output_dir_;
  std::optional<EventFileWriterOptions> writer_options_;
  bool log_line_;
  bool started_ = false;
};

}  // namespace runhooks
