// ChiefSessionCreator: TensorFlow's session creator for the chief. It makes a fresh backend and
// restores the latest checkpoint of checkpoint_dir into it, at the start and on every recovery.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/hook_state.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_creator.hpp>

namespace runhooks {

struct ChiefSessionOptions {
  // Restore the latest checkpoint of this directory (none yet, or no directory: start from the
  // factory's state).
  std::string_view checkpoint_dir{};
  // Or restore exactly this checkpoint prefix; it must exist. Not both (TensorFlow's rule).
  std::string_view checkpoint_filename_with_path{};
  // The first backend starts from the factory's state whatever checkpoint_dir holds; recoveries
  // restore the latest checkpoint as usual (by then the saver has written one of this run).
  bool start_fresh = false;
  // Restore the backend's state but not the hooks' (each starts from its begin()): for a session
  // whose stateful hooks differ from those of the run that saved the checkpoint, which is
  // otherwise an error naming the hook (hook_state.hpp).
  bool ignore_hook_states = false;
};

namespace detail {

// A checkpoint's hook-state file, read as untrusted: nullopt when there is none; a link, a
// directory or a file larger than any save writes is a CheckpointError naming it.
inline std::optional<std::string> read_hook_state_file(const std::filesystem::path& file) {
  int fd;
  do {
    fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    if (errno == ELOOP)
      throw CheckpointError("runhooks: the hook-state file " + quoted_path(file) +
                            " is a symbolic link, which no runhooks save makes; not followed.");
    throw_file_error("cannot open", file, errno);
  }
  const FileDescriptor owner(fd, file);
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw_file_error("cannot stat", file, errno);
  if (!S_ISREG(info.st_mode))
    throw CheckpointError("runhooks: the hook-state file " + quoted_path(file) +
                          " is not a regular file.");
  std::string text;
  char buffer[1 << 14];
  for (;;) {
    const ::ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_file_error("reading", file, errno);
    }
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > max_hook_state_bytes) break;  // the parser names the size
  }
  return text;
}

}  // namespace detail

// Restores checkpoint `prefix` into `backend`; a failure is a CheckpointError naming the
// checkpoint and the backend's reason (a missing file, a checksum that does not match, ...).
template <Checkpointable Backend>
void restore_checkpoint(Backend& backend, const std::filesystem::path& prefix) {
  try {
    backend.restore(prefix);
  } catch (const std::exception& e) {
    throw CheckpointError("runhooks: restoring checkpoint " + detail::quoted_path(prefix) +
                          " failed: " + e.what());
  }
  std::string line = "runhooks: restored checkpoint " + prefix.string();
  if constexpr (HasGlobalStep<Backend>)
    line += " (global step " + std::to_string(static_cast<std::int64_t>(backend.global_step())) + ")";
  log(Severity::info, line);
}

// A SessionCreator (see session_creator.hpp) for a Checkpointable backend: create_session()
// calls the factory, and initialize(), which the session calls on every fresh backend before any
// hook's after_create_session, restores:
//   - checkpoint_filename_with_path if given; it must exist;
//   - else latest_checkpoint(checkpoint_dir), if the directory has a state file.
// A state file that cannot be parsed or names a checkpoint whose files are missing, and a
// checkpoint the backend cannot restore (torn, a failed checksum), are CheckpointErrors naming
// the file, raised at session creation or by the run() that recovers: TensorFlow silently starts
// from scratch there, losing the run. start_fresh is the explicit way to do that.
template <BackendFactory Factory, RetryPolicy Policy = RetryForever>
class ChiefSessionCreator {
 public:
  using backend_type = std::remove_cvref_t<std::invoke_result_t<Factory&>>;
  static_assert(detail::check_checkpointable_for_creator<backend_type>::value);

  explicit ChiefSessionCreator(Factory factory, ChiefSessionOptions options = {}, Policy policy = {})
      : factory_(std::move(factory)), policy_(std::move(policy)),
        checkpoint_dir_(options.checkpoint_dir),
        checkpoint_filename_(options.checkpoint_filename_with_path),
        start_fresh_(options.start_fresh), ignore_hook_states_(options.ignore_hook_states) {
    if (!checkpoint_dir_.empty() && !checkpoint_filename_.empty())
      throw std::invalid_argument(
          "Can not provide both checkpoint_dir and checkpoint_filename_with_path. "
          "(ChiefSessionOptions: checkpoint_dir = '" + checkpoint_dir_.string() +
          "', checkpoint_filename_with_path = '" + checkpoint_filename_.string() + "')");
    if constexpr (requires { policy_.validate(); }) policy_.validate();
  }

  backend_type create_session() { return factory_(); }

  void initialize(backend_type& backend) {
    if constexpr (Checkpointable<backend_type>) {
      const bool fresh = std::exchange(start_fresh_, false);
      restored_from_.reset();
      if (fresh) {
        log(Severity::info, "runhooks: starting fresh (ChiefSessionOptions::start_fresh), "
                            "whatever " + detail::quoted_path(checkpoint_dir_) + " holds.");
        return;
      }
      // A background save to that directory (the one in flight when the backend was lost)
      // finishes first.
      const std::filesystem::path& where =
          checkpoint_filename_.empty() ? checkpoint_dir_ : checkpoint_filename_.parent_path();
      if (!where.empty()) detail::SavesInFlight::instance().wait(detail::directory_key(where));
      std::optional<std::filesystem::path> prefix;
      if (!checkpoint_filename_.empty()) {
        if (!checkpoint_exists(checkpoint_filename_))
          throw CheckpointError("runhooks: ChiefSessionOptions::checkpoint_filename_with_path " +
                                detail::quoted_path(checkpoint_filename_) +
                                " names no checkpoint: no file starts with it.");
        prefix = checkpoint_filename_;
      } else if (!checkpoint_dir_.empty()) {
        prefix = latest_checkpoint(checkpoint_dir_);
      }
      if (!prefix) return;
      try {
        restore_checkpoint(backend, *prefix);
      } catch (const CheckpointError& e) {
        throw CheckpointError(std::string(e.what()) +
                              " (ChiefSessionOptions::start_fresh starts from scratch instead.)");
      }
      restored_from_ = prefix;
    }
  }

  // Called by the session after initialize() (session/hook_states.hpp): the session's stateful
  // hooks take the states saved in <checkpoint>.hooks, which must hold exactly those hooks. A
  // checkpoint without the file restores into a session without stateful hooks only. Errors are
  // CheckpointErrors naming the file and the hook; nothing is restored into any hook then.
  void restore_hook_states(const HookStateAccess& access) {
    if (!restored_from_ || ignore_hook_states_) return;
    const std::filesystem::path file = restored_from_->string() + std::string(hook_state_suffix);
    const std::optional<std::string> text = detail::read_hook_state_file(file);
    if (!text && access.count == 0) return;
    try {
      // Without the file, an empty set: the error names the first hook that has no state.
      access.decode(access.session,
                    text ? std::string_view(*text)
                         : std::string_view("runhooks-hook-states 1\nend\n"));
    } catch (const std::invalid_argument& e) {
      throw CheckpointError(
          "runhooks: restoring the hook states of checkpoint " + detail::quoted_path(*restored_from_) +
          " failed: " + (text ? "the file " + detail::quoted_path(file) + ": "
                              : "there is no file " + detail::quoted_path(file) + ", so ") +
          e.what() + ". (ChiefSessionOptions::ignore_hook_states restores the backend alone.)");
    }
  }

  constexpr const Policy& policy() const noexcept { return policy_; }

  // The checkpoint the newest backend was restored from, if any.
  const std::optional<std::filesystem::path>& restored_from() const noexcept { return restored_from_; }

 private:
  [[no_unique_address]] Factory factory_;
  [[no_unique_address]] Policy policy_;
  std::filesystem::path checkpoint_dir_;
  std::filesystem::path checkpoint_filename_;
  bool start_fresh_;
  bool ignore_hook_states_;
  std::optional<std::filesystem::path> restored_from_;
};

template <class Factory>
ChiefSessionCreator(Factory) -> ChiefSessionCreator<Factory>;
template <class Factory>
ChiefSessionCreator(Factory, ChiefSessionOptions) -> ChiefSessionCreator<Factory>;
template <class Factory, class Policy>
ChiefSessionCreator(Factory, ChiefSessionOptions, Policy) -> ChiefSessionCreator<Factory, Policy>;

}  // namespace runhooks
