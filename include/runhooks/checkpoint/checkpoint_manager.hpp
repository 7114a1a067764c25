// CheckpointManager: one checkpoint directory. Names checkpoints as TensorFlow does
// (<dir>/<basename>-<step>), commits each save atomically through the state file, keeps
// max_to_keep of them (plus one every keep_checkpoint_every_n_hours) and cleans up after a
// process killed mid-save.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cerrno>
#include <condition_variable>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/directory_lock.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

namespace detail {

// The checkpoint directories that saves of this process are writing to in the background. A
// restore waits until none is in flight to its directory, so that a recovery restores the save
// that was being written when the backend was lost, not the one before.
class SavesInFlight {
 public:
  static SavesInFlight& instance() {
    static SavesInFlight saves;
    return saves;
  }
  void add(const std::string& directory) {
    std::lock_guard lock(mutex_);
    ++count_[directory];
  }
  void remove(const std::string& directory) {
    {
      std::lock_guard lock(mutex_);
      if (--count_[directory] == 0) count_.erase(directory);
    }
    changed_.notify_all();
  }
  void wait(const std::string& directory) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return count_.find(directory) == count_.end(); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, int> count_;
};

}  // namespace detail

// When CheckpointManager::save deletes the checkpoints that retention drops. Either way the state
// file has stopped naming them and records them as pending deletion before any file goes, so a
// process killed while they are being deleted leaves files the next open() removes.
enum class DeleteDropped {
  now,            // before save() returns, on the calling thread
  in_background,  // on a thread of their own, started once the save is committed: save() returns
                  // without paying for freeing a large checkpoint's blocks (~24 ms for 64 MiB on
                  // ext4). The next save(), open() or close() waits for it first
                  // (wait_for_deletions()), so no two operations on the directory overlap.
};

struct CheckpointManagerOptions {
  std::filesystem::path checkpoint_dir;
  std::string basename = "model.ckpt";
  int max_to_keep = 5;  // 0 keeps every checkpoint (and the state file names only the latest)
  std::optional<double> keep_checkpoint_every_n_hours{};
};

struct CheckpointEntry {
  std::string name;  // as in the state file: relative to the directory, or absolute
  double timestamp;  // seconds since the epoch when it was saved
  friend bool operator==(const CheckpointEntry&, const CheckpointEntry&) = default;
};

// How one save is made durable. The backend writes its files under a hidden staging prefix
// <dir>/.<basename>-<step>.tmp-<token>; then:
//   1. every staging file is fsynced;
//   2. each is hard-linked to its final name <dir>/<basename>-<step><suffix>;
//   3. the state file is replaced atomically (see write_checkpoint_state), naming the new
//      checkpoint with the suffixes its files have, and no longer naming those retention drops
//      (recorded as pending deletions until their files are gone): the new state goes to a
//      temporary file, which is fsynced; the directory is fsynced (the links of 2 are durable
//      before any state names them); the temporary file is renamed over the state file; the
//      directory is fsynced again (the save is durable when save() returns);
//   4. the staging names are removed, and the dropped checkpoints' files (now, or on a thread of
//      their own: DeleteDropped).
// A process killed before 3 leaves the previous state file, which names only complete
// checkpoints; one killed after 3 leaves the new one. Re-saving a step the state file already
// names (after a restore, the creation save sees the restored step) first points the state file
// at the complete staging copy, so that the old files can be replaced while the state names
// neither. What a killed save leaves behind (staging files, final names linked to them, dropped
// checkpoints not yet deleted) is removed by the next open(). Without hard links (some network
// file systems) files are copied instead, and a kill between steps 2 and 3 may leave a
// checkpoint's files that no state file names.
//
// The state file is untrusted (TensorFlow writes absolute paths and un-stepped prefixes; a damaged
// or hostile one can name anything): a relative and an absolute spelling of one checkpoint are one
// checkpoint, and only what checkpoint/detail/checkpoint_files.hpp proves to be a checkpoint's
// file inside the directory is ever deleted; whatever else the state names is left in place with
// one warning. A manager is the directory's only writer while it is open (a POSIX lock on
// <dir>/.runhooks-lock, see detail/directory_lock.hpp); close() or the destructor releases it. The
// lock is this process's: a fork()ed child's copy of an open manager is not the writer.
class CheckpointManager {
 public:
  explicit CheckpointManager(CheckpointManagerOptions options) : options_(std::move(options)) {
    if (options_.checkpoint_dir.empty())
      throw std::invalid_argument("runhooks: checkpoint_dir must name a directory, got ''.");
    validate_basename(options_.basename);
    if (options_.max_to_keep < 0)
      throw std::invalid_argument("runhooks: max_to_keep must be at least 0, got " +
                                  std::to_string(options_.max_to_keep) + ".");
    if (options_.keep_checkpoint_every_n_hours &&
        !(*options_.keep_checkpoint_every_n_hours > 0.0 &&
          *options_.keep_checkpoint_every_n_hours * 3600.0 <= detail::max_duration_secs))
      throw std::invalid_argument(
          "runhooks: keep_checkpoint_every_n_hours must be greater than 0 and at most " +
          detail::format_number(detail::max_duration_secs / 3600.0) + ", got " +
          detail::format_number(*options_.keep_checkpoint_every_n_hours) + ".");
  }
  CheckpointManager(CheckpointManager&&) noexcept = default;
  CheckpointManager& operator=(CheckpointManager&&) noexcept = default;

  // Closes quietly: an error is logged, not thrown. Waits for a deletion in the background.
  ~CheckpointManager() {
    try {
      close();
    } catch (const std::exception& e) {
      log(Severity::warning, std::string("runhooks: closing the checkpoint directory failed: ") +
                                 e.what());
    }
  }

  // A basename must be a plain file name that cannot be taken for the state file or for one of
  // runhooks' hidden temporary files.
  static void validate_basename(std::string_view basename) {
    if (basename.empty() || basename.find('/') != std::string_view::npos ||
        basename.front() == '.' || basename == checkpoint_state_filename ||
        basename.find('\0') != std::string_view::npos)
      throw std::invalid_argument(
          "runhooks: the checkpoint basename must be a file name without '/', not starting with "
          "'.' and not 'checkpoint', got '" + std::string(basename) + "'.");
  }

  const std::filesystem::path& directory() const noexcept { return options_.checkpoint_dir; }
  const CheckpointManagerOptions& options() const noexcept { return options_; }

  // Creates the directory if missing, takes its lock (a second writer fails here, naming the
  // holder), checks that a file can be written and synced there, reads the state file (the record
  // of earlier runs: retention carries on from it) and removes what a killed save left. Throws
  // CheckpointError naming the directory and the cause. `now` (seconds since the epoch) starts
  // the keep_checkpoint_every_n_hours period when the state has none.
  void open(double now) {
    wait_for_deletions();
    const std::filesystem::path& dir = options_.checkpoint_dir;
    std::error_code error;
    detail::check_file_operation(dir);
    std::filesystem::create_directories(dir, error);
    if (error)
      throw CheckpointError("runhooks: cannot create the checkpoint directory " +
                            detail::quoted_path(dir) + ": " + error.message());
    if (!std::filesystem::is_directory(dir, error))
      throw CheckpointError("runhooks: the checkpoint directory " + detail::quoted_path(dir) +
                            " is not a directory.");
    if (!lock_.held()) lock_ = detail::DirectoryLock::acquire(dir);
    probe_writable();
    key_ = detail::directory_key(dir);
    entries_.clear();
    latest_.reset();
    suffixes_.clear();
    pending_.clear();
    disk_pending_.clear();
    const std::optional<CheckpointState> state = read_checkpoint_state(dir);
    if (state) {
      const std::size_t n = state->all_model_checkpoint_paths.size();
      const bool dated = state->all_model_checkpoint_timestamps.size() == n;
      for (std::size_t i = 0; i < n; ++i) {
        const std::string name = own_spelling(state->all_model_checkpoint_paths[i]);
        add_entry({name, dated ? state->all_model_checkpoint_timestamps[i] : modification_time(name, now)});
      }
      const std::string latest = own_spelling(state->model_checkpoint_path);
      if (entries_.empty() || entries_.back().name != latest)
        add_entry({latest, modification_time(latest, now)});
      latest_ = latest;
      last_preserved_ = state->last_preserved_timestamp.value_or(now);
      for (const auto& [name, suffixes] : state->file_suffixes) {
        const std::optional<std::string> own = detail::own_checkpoint_name(key_, name);
        if (!own) continue;
        std::vector<std::string>& kept = suffixes_[*own];
        for (const std::string& suffix : suffixes)
          if (detail::is_valid_checkpoint_suffix(suffix) && !detail::is_reserved_file(*own + suffix))
            kept.push_back(suffix);
      }
      // A name the state still lists is not pending deletion, whatever a damaged line says.
      for (const std::string& pending : state->pending_deletions) {
        disk_pending_.push_back(own_spelling(pending));
        if (!names(disk_pending_.back())) add_pending(disk_pending_.back());
      }
    } else {
      last_preserved_ = now;
    }
    sweep();
    opened_ = true;
  }

  bool is_open() const noexcept { return opened_; }

  // Writes the state once more if it still records deletions that have since been done (a state
  // file left after a clean end lists no pending deletion), and releases the directory's lock.
  // A later save() or open() opens it again.
  void close() {
    wait_for_deletions();
    if (!lock_.held()) return;
    if (opened_ && latest_ && disk_pending_ != pending_) commit(entries_, last_preserved_);
    opened_ = false;
    lock_ = detail::DirectoryLock();
  }

  // The prefix a save at `step` gets: <dir>/<basename>-<step>.
  std::filesystem::path prefix_for(std::int64_t step) const {
    return options_.checkpoint_dir / name_for(step);
  }

  // Saves a checkpoint at `step`: calls write(staging_prefix), which must write one or more files
  // whose names start with that prefix (followed by nothing or by a non-digit), then commits it as
  // described above, dated `timestamp`, and deletes the checkpoints retention drops as `deletion`
  // says. Returns the checkpoint's prefix. On any error, including from write(), throws
  // CheckpointError naming the checkpoint and the cause; the state file and the checkpoints it
  // names are as they were.
  template <class Write>
  std::filesystem::path save(std::int64_t step, double timestamp, Write&& write,
                             DeleteDropped deletion = DeleteDropped::now) {
    wait_for_deletions();
    // A fork()ed child's copy of an open manager does not hold the lock: it opens as a second
    // writer would (detail/directory_lock.hpp).
    if (!opened_ || !lock_.held()) open(timestamp);
    const std::filesystem::path& dir = options_.checkpoint_dir;
    const std::string name = name_for(step);
    const std::string stage = "." + name + ".tmp-" + detail::unique_token();
    std::vector<std::string> suffixes, linked;
    bool stage_named = false;
    try {
      write(dir / stage);
      for (const std::string& file : detail::names_starting_with(dir, stage)) {
        const std::string suffix = file.substr(stage.size());
        if (!detail::is_valid_checkpoint_suffix(suffix))
          throw CheckpointError("runhooks: the backend's save wrote " +
                                detail::quoted_path(dir / file) +
                                ": a checkpoint file must be named by the prefix, or the prefix "
                                "followed by a non-digit (e.g. '.arrays').");
        suffixes.push_back(suffix);
      }
      if (suffixes.empty())
        throw CheckpointError("runhooks: the backend's save(" + detail::quoted_path(dir / stage) +
                              ") wrote no file whose name starts with that prefix.");
      for (const std::string& suffix : suffixes) detail::fsync_path(dir / (stage + suffix));

      // This save supersedes an older one at the same step, and a staging copy of one that the
      // state named while it was being replaced (a save killed then).
      std::vector<CheckpointEntry> entries = entries_;
      std::vector<std::string> dropped;
      std::erase_if(entries, [&](const CheckpointEntry& e) {
        if (is_staging_name_of(e.name, name)) dropped.push_back(e.name);
        return e.name == name || is_staging_name_of(e.name, name);
      });
      entries.push_back({name, timestamp});
      double mark = last_preserved_;
      for (std::string& d : retain(entries, mark)) dropped.push_back(std::move(d));
      for (const std::string& d : dropped) add_pending(d);

      if (!names(name)) {
        // Files of exactly these names can only be a killed save's, at this step, that no state
        // named: they make way for the new links.
        for (const std::string& suffix : suffixes) detail::remove_file(dir / (name + suffix));
        link_all(stage, name, suffixes, linked);
        suffixes_[name] = suffixes;
        commit(entries, mark, /*names_first=*/true);  // the links durable before the state
      } else {
        // The state names an older checkpoint at this step: name the staging copy meanwhile.
        std::vector<CheckpointEntry> staged = entries;
        staged.back().name = stage;
        suffixes_[stage] = suffixes;
        add_pending(name);
        commit(staged, mark, /*names_first=*/true);  // the staging names durable first
        stage_named = true;
        remove_pending();
        for (const std::string& suffix : suffixes) detail::remove_file(dir / (name + suffix));
        suffixes_[name] = suffixes;
        link_all(stage, name, suffixes, linked);
        commit(entries, mark, /*names_first=*/true);
        stage_named = false;
      }
      linked.clear();
      for (const std::string& suffix : suffixes) detail::remove_file_quietly(dir / (stage + suffix));
      if (deletion == DeleteDropped::in_background)
        start_deletions();
      else
        remove_pending();
    } catch (const std::exception& e) {
      // What this save linked but no state names is provably its own.
      for (const std::string& file : linked) detail::remove_file_quietly(dir / file);
      if (!stage_named)
        for (const std::string& file : detail::names_starting_with_quietly(dir, stage))
          detail::remove_file_quietly(dir / file);
      throw CheckpointError("runhooks: saving checkpoint " + detail::quoted_path(dir / name) +
                            " failed: " + e.what());
    }
    return dir / name;
  }

  // The checkpoints the state file names, oldest save first: runhooks' own as plain file names
  // (an absolute spelling of one in this directory included), any other as the state wrote it.
  const std::vector<CheckpointEntry>& checkpoints() const noexcept { return entries_; }

  // The newest checkpoint's prefix, if any.
  std::optional<std::filesystem::path> latest() const {
    if (!latest_) return std::nullopt;
    return detail::join_checkpoint_path(options_.checkpoint_dir, *latest_);
  }

  // Waits for the deletion a save with DeleteDropped::in_background started, if any. A file it
  // could not delete was logged and stays pending (the next save tries again); nothing throws.
  void wait_for_deletions() noexcept {
    if (!deleting_.valid()) return;
    try {
      for (const std::string& name : deleting_.get()) std::erase(pending_, name);
    } catch (...) {  // out of memory in the deleter: what it did not report stays pending
    }
  }

  // Whether a deletion is still running in the background.
  bool deleting() const {
    return deleting_.valid() &&
           deleting_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  }

 private:
  std::string name_for(std::int64_t step) const {
    return options_.basename + "-" + std::to_string(step);
  }

  // A state-file entry as this manager spells it: the plain file name when it is a checkpoint of
  // this directory, else as written (kept in the list, never deleted).
  std::string own_spelling(const std::string& entry) const {
    return detail::own_checkpoint_name(key_, entry).value_or(entry);
  }

  // One entry per checkpoint: a second spelling of one replaces the first.
  void add_entry(CheckpointEntry entry) {
    std::erase_if(entries_, [&](const CheckpointEntry& e) { return e.name == entry.name; });
    entries_.push_back(std::move(entry));
  }

  // The suffixes of the files the backend wrote for `name` at save time; nullptr without a record.
  const std::vector<std::string>* recorded_suffixes(const std::string& name) const {
    const auto found = suffixes_.find(name);
    return found == suffixes_.end() ? nullptr : &found->second;
  }

  void add_pending(const std::string& name) {
    if (std::find(pending_.begin(), pending_.end(), name) == pending_.end()) pending_.push_back(name);
  }

  // Whether `candidate` is ".<name>.tmp-<16 hex digits>".
  static bool is_staging_name_of(std::string_view candidate, std::string_view name) {
    constexpr std::string_view tmp = ".tmp-";
    return candidate.size() == 1 + name.size() + tmp.size() + 16 && candidate[0] == '.' &&
           candidate.substr(1, name.size()) == name &&
           candidate.substr(1 + name.size(), tmp.size()) == tmp;
  }

  bool names(const std::string& name) const {
    if (latest_ && *latest_ == name) return true;
    for (const CheckpointEntry& e : entries_)
      if (e.name == name) return true;
    return false;
  }

  // TensorFlow's Saver: beyond max_to_keep the oldest saves leave the list; each is deleted unless
  // it is the first one dated past the keep_checkpoint_every_n_hours mark, which is then kept (but
  // no longer named) and moves the mark on by that period. With max_to_keep 0 nothing is deleted
  // and the list holds only the newest. Unlike Saver, which drops one per save, this drops all the
  // excess (a run restarted with a smaller max_to_keep). Returns the names to delete.
  std::vector<std::string> retain(std::vector<CheckpointEntry>& entries, double& mark) const {
    std::vector<std::string> dropped;
    if (options_.max_to_keep == 0) {
      entries.erase(entries.begin(), entries.end() - 1);
      return dropped;
    }
    while (entries.size() > static_cast<std::size_t>(options_.max_to_keep)) {
      const CheckpointEntry oldest = entries.front();
      entries.erase(entries.begin());
      if (options_.keep_checkpoint_every_n_hours) {
        const double period = *options_.keep_checkpoint_every_n_hours * 3600.0;
        if (oldest.timestamp > mark + period) {
          mark += period;
          continue;
        }
      }
      dropped.push_back(oldest.name);
    }
    return dropped;
  }

  // Writes the state naming `entries` (the last is the latest), the pending deletions and the
  // suffixes of every own checkpoint it names or will delete. `names_first`: files were linked or
  // created in the directory for it, to be made durable before it (replace_checkpoint_state).
  void commit(const std::vector<CheckpointEntry>& entries, double mark, bool names_first = false) {
    CheckpointState state;
    state.model_checkpoint_path = entries.back().name;
    for (const CheckpointEntry& e : entries) {
      state.all_model_checkpoint_paths.push_back(e.name);
      state.all_model_checkpoint_timestamps.push_back(e.timestamp);
    }
    if (options_.keep_checkpoint_every_n_hours) state.last_preserved_timestamp = mark;
    std::erase_if(pending_, [&](const std::string& p) {
      return std::any_of(entries.begin(), entries.end(),
                         [&](const CheckpointEntry& e) { return e.name == p; });
    });
    state.pending_deletions = pending_;
    std::erase_if(suffixes_, [&](const auto& item) {
      return std::find(pending_.begin(), pending_.end(), item.first) == pending_.end() &&
             std::none_of(entries.begin(), entries.end(),
                          [&](const CheckpointEntry& e) { return e.name == item.first; });
    });
    state.file_suffixes = suffixes_;
    detail::replace_checkpoint_state(options_.checkpoint_dir, state, names_first);
    entries_ = entries;
    latest_ = entries.back().name;
    last_preserved_ = mark;
    disk_pending_ = pending_;
  }

  // Deletes the files of every pending checkpoint the state does not name; those that cannot be
  // deleted stay pending.
  void remove_pending() {
    std::erase_if(pending_, [&](const std::string& p) { return !names(p) && remove_checkpoint(p); });
  }

  // The same, on a thread of its own (DeleteDropped::in_background). What to delete is decided
  // here, on the caller's thread, with the same proof; the thread only unlinks those files, and
  // wait_for_deletions() takes what it removed off the pending list. Without a thread, here.
  void start_deletions() {
    using Work = std::vector<std::pair<std::string, std::vector<std::string>>>;
    auto work = std::make_shared<Work>();
    std::erase_if(pending_, [&](const std::string& p) {
      if (names(p)) return false;
      std::optional<std::vector<std::string>> files = files_to_remove(p);
      if (!files) return true;  // nothing of it is ours to delete
      work->emplace_back(p, std::move(*files));
      return false;
    });
    if (work->empty()) return;
    try {
      deleting_ = std::async(std::launch::async, [dir = options_.checkpoint_dir, work] {
        std::vector<std::string> removed;
        for (const auto& [name, files] : *work)
          if (remove_files(dir, files)) removed.push_back(name);
        return removed;
      });
    } catch (const std::system_error&) {  // no thread to be had
      for (const auto& [name, files] : *work)
        if (remove_files(options_.checkpoint_dir, files)) std::erase(pending_, name);
    }
  }

  // Deletes the files of checkpoint `name` that checkpoint_files.hpp proves are its own. Returns
  // false when one of them could not be removed (logged; it stays pending).
  bool remove_checkpoint(const std::string& name) {
    const std::optional<std::vector<std::string>> files = files_to_remove(name);
    return !files || remove_files(options_.checkpoint_dir, *files);
  }

  // Removes `files` from `dir`; false when one could not be removed (logged). On any thread.
  static bool remove_files(const std::filesystem::path& dir,
                           const std::vector<std::string>& files) {
    bool removed = true;
    for (const std::string& file : files) {
      try {
        detail::remove_file(dir / file);
      } catch (const CheckpointError& e) {
        try {
          log(Severity::warning, std::string(e.what()) + " (the next save tries again).");
        } catch (...) {  // a sink that throws: the file stays pending all the same
        }
        removed = false;
      }
    }
    return removed;
  }

  // The files of checkpoint `name` that checkpoint_files.hpp proves are its own, after a warning
  // naming what looks like its own but is not provably; nullopt, with a warning, when `name` is
  // not a plain file name of the directory (nothing of it is ever deleted).
  std::optional<std::vector<std::string>> files_to_remove(const std::string& name) const {
    const std::filesystem::path& dir = options_.checkpoint_dir;
    if (!detail::is_plain_file_name(name)) {
      log(Severity::warning, "runhooks: the checkpoint state file of " + detail::quoted_path(dir) +
                                 " named '" + name + "', which is not a checkpoint in that "
                                 "directory: its files, if any, are left in place.");
      return std::nullopt;
    }
    std::vector<std::string> files = detail::checkpoint_files(dir, name, recorded_suffixes(name));
    // Name what looks like this checkpoint's yet was not deleted, unless it is another one's
    // (model.ckpt-40.arrays is not model.ckpt's).
    const auto another_checkpoints = [&](const std::string& file) {
      const auto longer = [&](const std::string& other) {
        return other.size() > name.size() && detail::belongs_to_prefix(file, other);
      };
      return std::any_of(pending_.begin(), pending_.end(), longer) ||
             std::any_of(entries_.begin(), entries_.end(),
                         [&](const CheckpointEntry& e) { return longer(e.name); });
    };
    std::string kept;
    for (const std::string& file : detail::names_starting_with_quietly(dir, name))
      if (detail::belongs_to_prefix(file, name) && !detail::is_reserved_file(file) &&
          std::find(files.begin(), files.end(), file) == files.end() && !another_checkpoints(file))
        kept += (kept.empty() ? "'" : ", '") + file + "'";
    if (!kept.empty())
      log(Severity::warning, "runhooks: deleting checkpoint " + detail::quoted_path(dir / name) +
                                 " left " + kept + " in place: not a file the backend wrote for "
                                 "it, nor a TensorFlow checkpoint file.");
    return files;
  }

  void link_all(const std::string& stage, const std::string& name,
                const std::vector<std::string>& suffixes, std::vector<std::string>& linked) {
    const std::filesystem::path& dir = options_.checkpoint_dir;
    for (const std::string& suffix : suffixes) {
      const std::filesystem::path from = dir / (stage + suffix), to = dir / (name + suffix);
      detail::check_file_operation(to);
      if (::link(from.c_str(), to.c_str()) == 0) {
        linked.push_back(name + suffix);
        continue;
      }
      const int error = errno;
      if (error != EPERM && error != EXDEV && error != ENOTSUP && error != EMLINK &&
          error != ENOSYS && error != EOPNOTSUPP)
        throw CheckpointError("runhooks: linking " + detail::quoted_path(from) + " to " +
                              detail::quoted_path(to) + ": " + detail::errno_text(error));
      copy_durably(from, to);
      linked.push_back(name + suffix);
    }
  }

  static void copy_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
    const std::filesystem::path temporary = to.string() + ".tmp-" + detail::unique_token();
    try {
      detail::write_file_durably(temporary, detail::read_whole_file(from));
      detail::rename_over(temporary, to);
    } catch (...) {
      detail::remove_file_quietly(temporary);
      throw;
    }
  }

  double modification_time(const std::string& name, double fallback) const {
    if (!detail::is_plain_file_name(name)) return fallback;
    for (const std::string& file :
         detail::checkpoint_files(options_.checkpoint_dir, name, recorded_suffixes(name))) {
      struct stat info {};
      if (::stat((options_.checkpoint_dir / file).c_str(), &info) == 0)
        return static_cast<double>(info.st_mtim.tv_sec) + 1e-9 * static_cast<double>(info.st_mtim.tv_nsec);
    }
    return fallback;
  }

  void probe_writable() {
    const std::filesystem::path probe =
        options_.checkpoint_dir / (".runhooks-probe-" + detail::unique_token());
    try {
      detail::write_file_durably(probe, "runhooks");
      detail::remove_file(probe);
    } catch (const CheckpointError& e) {
      detail::remove_file_quietly(probe);
      throw CheckpointError("runhooks: the checkpoint directory " +
                            detail::quoted_path(options_.checkpoint_dir) +
                            " cannot be written: " + e.what());
    }
  }

  // Removes what killed saves left: checkpoints the state records as pending deletion and no
  // longer names; staging files of saves the state does not name, with the final names linked to
  // them (the same inode: provably that save's); temporary state files and write probes. Only
  // names runhooks can have made (detail/checkpoint_files.hpp), and only regular files or links.
  void sweep() {
    const std::filesystem::path& dir = options_.checkpoint_dir;
    remove_pending();
    std::set<std::string> named;
    for (const CheckpointEntry& e : entries_) named.insert(e.name);
    if (latest_) named.insert(*latest_);
    for (const std::string& file : detail::names_starting_with(dir, "")) {
      if (detail::is_temporary_file_name(file)) {
        if (detail::is_file_or_link(dir / file)) detail::remove_file_quietly(dir / file);
        continue;
      }
      const std::size_t staged = detail::staging_prefix_length(file, options_.basename);
      if (staged == 0 || !detail::is_file_or_link(dir / file)) continue;
      const std::string stage = file.substr(0, staged);
      if (named.count(stage)) continue;
      const std::string name = stage.substr(1, stage.size() - 1 - std::string_view(".tmp-").size() - 16);
      if (!named.count(name)) {
        const std::filesystem::path linked = dir / (name + file.substr(stage.size()));
        struct stat a {}, b {};
        if (::lstat((dir / file).c_str(), &a) == 0 && ::lstat(linked.c_str(), &b) == 0 &&
            S_ISREG(b.st_mode) && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
          detail::remove_file_quietly(linked);
      }
      detail::remove_file_quietly(dir / file);
    }
  }

  CheckpointManagerOptions options_;
  std::string key_;  // detail::directory_key of the directory, once open
  detail::DirectoryLock lock_;
  std::vector<CheckpointEntry> entries_;
  std::optional<std::string> latest_;
  std::map<std::string, std::vector<std::string>> suffixes_;  // of own checkpoints, named or pending
  std::vector<std::string> pending_;       // dropped, files maybe still there
  std::vector<std::string> disk_pending_;  // what the state file on disk records as pending
  double last_preserved_ = 0.0;
  bool opened_ = false;
  // DeleteDropped::in_background: the names whose files the deleter removed. Declared last: a
  // manager destroyed without close() (moved-from) still waits for it in ~future.
  std::future<std::vector<std::string>> deleting_;
};

}  // namespace runhooks
