// ExceptionCheckpointHook: when an exception leaves run(), writes the backend's state to a named
// checkpoint beside the regular ones that the state file never names (Lightning's
// OnExceptionCheckpoint).
#pragma once

#include <runhooks/detail/config.hpp>

#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_manager.hpp>  // validate_basename, the naming rules
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

struct ExceptionCheckpointOptions {
  // The directory, usually the CheckpointSaverHook's checkpoint_dir. Created if missing.
  std::string checkpoint_dir;
  // The checkpoint's prefix in that directory (Lightning's filename="on_exception"): a plain
  // file name, not starting with '.', not 'checkpoint', and not ending in '-<digits>' (that is
  // how a regular checkpoint is named).
  std::string name = "on_exception";

  const ExceptionCheckpointOptions& validate() const {
    if (checkpoint_dir.empty())
      throw std::invalid_argument(
          "runhooks: ExceptionCheckpointOptions::checkpoint_dir must name a directory, got ''.");
    try {
      CheckpointManager::validate_basename(name);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(
          "runhooks: ExceptionCheckpointOptions::name must be a file name without '/', not "
          "starting with '.' and not 'checkpoint', got '" + name + "'.");
    }
    const std::size_t dash = name.find_last_of('-');
    if (dash != std::string::npos && dash + 1 < name.size() &&
        name.find_first_not_of("0123456789", dash + 1) == std::string::npos)
      throw std::invalid_argument(
          "runhooks: ExceptionCheckpointOptions::name must not end in '-<digits>', the name of a "
          "regular checkpoint, got '" + name + "'.");
    return *this;
  }
};

// On an exception leaving run() or run_step_fn() (the on_exception hook point, concepts.hpp),
// calls the backend's save() (Checkpointable) under a hidden staging prefix
// <dir>/.<name>.tmp-<token>, fsyncs each file it wrote, renames each over <dir>/<name><suffix>
// (overwriting the previous exception checkpoint file by file) and fsyncs the directory. The
// state file is never read or written: the checkpoint that restores and resumes stays the last
// regular one, since the state at an exception may be the reason for it (Lightning makes
// on_exception.ckpt no candidate for resuming either). Restore it by hand, with the backend's
// restore("<dir>/<name>"), to look at it.
//
// Its own failure (a full disk, a backend whose save throws) is logged with the original error
// and never thrown: the caller receives the exception that ended training. One line is logged
// either way, as Lightning's "An <Type> was raised with message: ..., saved checkpoint to ...".
// What a killed exception save left (its staging files, provably ours by name) is removed by
// the next one. Differs from Lightning: the file is kept after a later clean end, for a
// post-mortem (Lightning removes on_exception.ckpt at teardown). Free on every step: it defines
// no per-step point.
class ExceptionCheckpointHook {
 public:
  explicit ExceptionCheckpointHook(ExceptionCheckpointOptions options)
      : options_(std::move(options.validate())) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names ExceptionCheckpointOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<ExceptionCheckpointOptions,
                                                        &ExceptionCheckpointOptions::checkpoint_dir,
                                                        &ExceptionCheckpointOptions::name>>
  explicit ExceptionCheckpointHook(...) = delete;  // Misspelt field? Write ExceptionCheckpointOptions{...} to see which

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(Checkpointable<Backend>,
                  "runhooks::ExceptionCheckpointHook needs a Checkpointable backend (`void "
                  "save(const std::filesystem::path& prefix) const` and restore); the backend "
                  "type is named in this instantiation.");
  }

  template <class Backend>
  void on_exception(Backend& backend, const std::exception_ptr& error) noexcept {
    const std::string what = describe(error);
    try {
      if constexpr (Checkpointable<Backend>) {
        const std::filesystem::path prefix = save_aside(backend);
        saved_ = prefix;
        log(Severity::warning, "runhooks: " + what + "; saved the backend's state to " +
                                   detail::quoted_path(prefix) +
                                   " (not a checkpoint to resume from: the state file is "
                                   "unchanged).");
      }
    } catch (const std::exception& e) {
      failures_ += 1;
      try {
        log(Severity::warning, "runhooks: " + what +
                                   "; ExceptionCheckpointHook could not save the backend's "
                                   "state: " + e.what());
      } catch (...) {
      }
    } catch (...) {
      failures_ += 1;
    }
  }

  const ExceptionCheckpointOptions& options() const noexcept { return options_; }
  // The prefix of the last exception checkpoint this hook wrote, if any.
  const std::optional<std::filesystem::path>& saved() const noexcept { return saved_; }
  // How many exception checkpoints failed (each was logged).
  int failures() const noexcept { return failures_; }

 private:
  static std::string describe(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return "an exception was raised with message: " + std::string(e.what());
    } catch (...) {
      return "an exception not derived from std::exception was raised";
    }
  }

  template <class Backend>
  std::filesystem::path save_aside(Backend& backend) {
    const std::filesystem::path dir(options_.checkpoint_dir);
    const std::string& name = options_.name;
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error)
      throw CheckpointError("runhooks: cannot create the checkpoint directory " +
                            detail::quoted_path(dir) + ": " + error.message());
    remove_killed_staging(dir);
    const std::string stage = "." + name + ".tmp-" + detail::unique_token();
    try {
      backend.save(dir / stage);
      const std::vector<std::string> suffixes = detail::staged_checkpoint_suffixes(dir, stage);
      // rename(2) replaces a planted link or file at the final name, never follows it.
      for (const std::string& suffix : suffixes)
        detail::rename_over(dir / (stage + suffix), dir / (name + suffix));
      detail::fsync_path(dir, /*directory=*/true);
    } catch (...) {
      for (const std::string& file : detail::names_starting_with_quietly(dir, stage))
        detail::remove_file_quietly(dir / file);
      throw;
    }
    return dir / name;
  }

  // Staging files of an exception save killed mid-way: .<name>.tmp-<16 hex digits><suffix>,
  // names only this hook makes.
  void remove_killed_staging(const std::filesystem::path& dir) const {
    const std::string start = "." + options_.name + ".tmp-";
    for (const std::string& file : detail::names_starting_with_quietly(dir, start))
      if (detail::starts_with_unique_token(std::string_view(file).substr(start.size())) &&
          detail::is_valid_checkpoint_suffix(std::string_view(file).substr(start.size() + 16)))
        detail::remove_file_quietly(dir / file);
  }

  ExceptionCheckpointOptions options_;
  std::optional<std::filesystem::path> saved_;
  int failures_ = 0;
};

}  // namespace runhooks
