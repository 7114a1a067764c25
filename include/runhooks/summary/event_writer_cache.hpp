// Defines `runhooks::EventFileWriterCache`, which gives every hook writing to one directory the same
// EventFileWriter, as TensorFlow's FileWriterCache.
#pragma once

#include <runhooks/detail/config.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>

#include <runhooks/summary/event_file_writer.hpp>

namespace runhooks {
namespace detail {

// The key of a log directory in EventFileWriterCache: absolute, with symlinks and `..` resolved,
// so that "logs", "./logs/" and a symlink to it name one directory. The directory must exist.
inline std::string logdir_key(const std::filesystem::path& logdir) {
  std::error_code error;
  std::filesystem::path key = std::filesystem::canonical(logdir, error);
  if (error) key = std::filesystem::absolute(logdir, error).lexically_normal();
  return key.string();
}

}  // namespace detail

// TensorFlow's FileWriterCache: one EventFileWriter per log directory per process, shared by
// every hook and output that writes there (StepCounterHook's SummaryOutput, SummarySaverHook,
// CheckpointSaverHook's SessionLog CHECKPOINT), so that a run's directory holds one event file
// and TensorBoard shows all of it. A directory is known by its absolute path with symlinks
// resolved. The file closes when the last holder releases its pointer; the next get() for that
// directory then makes a new file. Thread-safe. get() is meant for construction and begin(),
// never the per-step path: it takes a process-wide mutex and resolves the path.
//
// A writer is made with the options of the get() that makes it (the defaults when it passes
// none); a later get() whose flush_secs is shorter shortens the writer's, so that every holder
// gets its records to the file at least as often as it asked. A flush period never grows.
//
// Differs from TensorFlow: TF keeps its writers until FileWriterCache.clear(); and it keys them by
// the directory's spelling, so "logs" and "./logs" get two files.
class EventFileWriterCache {
 public:
  // The writer of `logdir`, made (with the directory) if no one holds one. A directory or file
  // that cannot be created is a std::system_error naming it, as EventFileWriter's constructor;
  // options out of range are std::invalid_argument (EventFileWriterOptions::validate).
  static std::shared_ptr<EventFileWriter> get(const std::filesystem::path& logdir,
                                              std::optional<EventFileWriterOptions> options = {}) {
    if (options) options->validate();
    detail::create_logdir(logdir);
    const std::string key = detail::logdir_key(logdir);
    Registry& registry = instance();
    const std::lock_guard lock(registry.mutex);
    std::erase_if(registry.writers, [](const auto& entry) { return entry.second.expired(); });
    if (auto found = registry.writers[key].lock()) {
      if (options && found->state_) found->state_->shorten_period(EventFileWriter::to_period(options->flush_secs));
      return found;
    }
    auto writer = std::make_shared<EventFileWriter>(logdir, options.value_or(EventFileWriterOptions{}));
    registry.writers[key] = writer;
    return writer;
  }

 private:
  struct Registry {
    std::mutex mutex;
    std::map<std::string, std::weak_ptr<EventFileWriter>> writers;
  };
  // Never destroyed: a hook in a static object may call get() while statics are torn down.
  static Registry& instance() {
    static Registry* const registry = new Registry;
    return *registry;
  }
};

}  // namespace runhooks
