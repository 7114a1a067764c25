// CheckpointManager: one checkpoint directory. Names checkpoints as TensorFlow does
// (<dir>/<basename>-<step>), commits each save atomically through the state file, keeps
// max_to_keep of them (plus one every keep_checkpoint_every_n_hours) and cleans up after a
// process killed mid-save.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <future>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/directory_lock.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/checkpoint/detail/saves_in_flight.hpp>
#include <runhooks/checkpoint/manager/best.hpp>
#include <runhooks/checkpoint/manager/commit.hpp>
#include <runhooks/checkpoint/manager/options.hpp>
#include <runhooks/checkpoint/manager/resume.hpp>
#include <runhooks/checkpoint/manager/retention.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

// The state file is untrusted (TensorFlow writes absolute paths and un-stepped prefixes; a damaged
// or hostile one can name anything): a relative and an absolute spelling of one checkpoint are one
// checkpoint, and only what checkpoint/detail/checkpoint_files.hpp proves to be a checkpoint's
// file inside the directory is ever deleted; whatever else the state names is left in place with
// one warning. A manager is the directory's only writer while it is open (a POSIX lock on
// <dir>/.runhooks-lock, see detail/directory_lock.hpp); close() or the destructor releases it. The
// lock is this process's: a fork()ed child's copy of an open manager is not the writer.
//
// The manager holds the directory's record (the members at the end); its private bases, which
// hold nothing, add what it does with it:
//   manager/resume.hpp     ManagerResume: open()'s reading of the state file and clean-up;
//   manager/commit.hpp     ManagerCommit: how one save is made durable;
//   manager/retention.hpp  ManagerRetention: which checkpoints are kept, and deleting the rest.
class CheckpointManager : detail::ManagerResume<CheckpointManager>,
                          detail::ManagerCommit<CheckpointManager>,
                          detail::ManagerRetention<CheckpointManager> {
  using Resume = detail::ManagerResume<CheckpointManager>;
  using Commit = detail::ManagerCommit<CheckpointManager>;
  using Retention = detail::ManagerRetention<CheckpointManager>;
  friend Resume;
  friend Commit;
  friend Retention;

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
    load_state(now);
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

  // Ranks scored saves (BestCheckpointHook): besides the latest max_to_keep, the state keeps
  // naming, and retention never drops, the top save_top_k by score (manager/best.hpp); the
  // scores live in the state file (runhooks-score records), so a restart keeps ranking. Once;
  // before or after open() (the records read are ranked then). Not while a save is in flight.
  // Throws std::invalid_argument naming a bad option, std::logic_error when already ranked.
  void rank_by(CheckpointRanking ranking) {
    if (ranked_)
      throw std::logic_error("runhooks: the checkpoint directory " +
                             detail::quoted_path(options_.checkpoint_dir) + " already ranks its "
                             "checkpoints by '" + best_.ranking().monitor + "': one "
                             "BestCheckpointHook per CheckpointSaverHook.");
    best_ = detail::BestRanking(std::move(ranking));
    ranked_ = true;
    if (opened_) rank_scores();
  }
  bool ranked() const noexcept { return ranked_; }
  const detail::BestRanking& ranking() const noexcept { return best_; }

  // The best checkpoint by score (its prefix joined to the directory, its step and score), or
  // nullopt when none is kept. Not while a save is in flight.
  std::optional<ScoredCheckpoint> best_checkpoint() const {
    std::optional<ScoredCheckpoint> best = best_.best();
    if (best) best->name = (options_.checkpoint_dir / best->name).string();
    return best;
  }
  // The kept best checkpoints, in the order they entered the top k (Lightning's best_k_models).
  const std::vector<ScoredCheckpoint>& best_checkpoints() const noexcept { return best_.kept(); }

  // The prefix a save at `step` gets: <dir>/<basename>-<step>.
  std::filesystem::path prefix_for(std::int64_t step) const {
    return options_.checkpoint_dir / name_for(step);
  }

  // Saves a checkpoint at `step`: calls write(staging_prefix), which must write one or more files
  // whose names start with that prefix (followed by nothing or by a non-digit), then commits it as
  // manager/commit.hpp describes, dated `timestamp`, and deletes the checkpoints retention drops as
  // `deletion` says. Returns the checkpoint's prefix. On any error, including from write(), throws
  // CheckpointError naming the checkpoint and the cause; the state file and the checkpoints it
  // names are as they were.
  // `score`: the monitored metric's value at this step, with rank_by(); a save it ranks enters
  // the top k, displacing the k-th, which stays while it is among the latest max_to_keep and is
  // otherwise deleted once this save is committed, as any dropped checkpoint is.
  template <class Write>
  std::filesystem::path save(std::int64_t step, double timestamp, Write&& write,
                             DeleteDropped deletion = DeleteDropped::now,
                             std::optional<double> score = std::nullopt) {
    wait_for_deletions();
    // A fork()ed child's copy of an open manager does not hold the lock: it opens as a second
    // writer would (detail/directory_lock.hpp).
    if (!opened_ || !lock_.held()) open(timestamp);
    return save_durably(step, timestamp, std::forward<Write>(write), deletion, score);
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
  using Retention::wait_for_deletions;
  // Whether a deletion is still running in the background.
  using Retention::deleting;

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

  // Whether retention keeps `name` for its score: in the top k, or scored for another metric.
  bool scored(const std::string& name) const {
    if (best_.contains(name)) return true;
    for (const CheckpointStateScore& s : other_scores_)
      if (s.name == name) return true;
    return false;
  }

  // Whether the state names `name`, as a checkpoint or as the latest.
  bool names(const std::string& name) const {
    if (latest_ && *latest_ == name) return true;
    for (const CheckpointEntry& e : entries_)
      if (e.name == name) return true;
    return false;
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
  bool ranked_ = false;
  detail::BestRanking best_;  // the top k by score (rank_by), in the order they entered it
  // Scores the state records for another metric (or with no ranking): kept as they are, and
  // their checkpoints with them, never displaced.
  std::vector<CheckpointStateScore> other_scores_;
  // DeleteDropped::in_background: the names whose files the deleter removed. Declared last: a
  // manager destroyed without close() (moved-from) still waits for it in ~future.
  std::future<std::vector<std::string>> deleting_;
};

}  // namespace runhooks
