// How CheckpointManager::save makes one checkpoint durable: the staging files, their links to the
// final names, the state file replaced atomically, and what a failed save removes.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/checkpoint/manager/best.hpp>
#include <runhooks/checkpoint/manager/options.hpp>

namespace runhooks::detail {

// How one save is made durable (CheckpointManager::save). The backend writes its files under a
// hidden staging prefix <dir>/.<basename>-<step>.tmp-<token>; then:
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
// A base of CheckpointManager (Manager), whose members it reads through self(); it holds nothing
// itself.
template <class Manager>
class ManagerCommit {
 protected:
  Manager& self() noexcept { return static_cast<Manager&>(*this); }
  const Manager& self() const noexcept { return static_cast<const Manager&>(*this); }

  // The body of save(), once the directory is open: the protocol above.
  // `score`: with a ranking, a save it ranks enters the top k (manager/best.hpp) before
  // retention runs, so that the k-th it displaces is dropped in the same commit (unless it is
  // among the latest); a failed save leaves the ranking as it was.
  template <class Write>
  std::filesystem::path save_durably(std::int64_t step, double timestamp, Write&& write,
                                     DeleteDropped deletion, std::optional<double> score) {
    const std::filesystem::path& dir = self().options_.checkpoint_dir;
    const std::string name = self().name_for(step);
    const std::string stage = "." + name + ".tmp-" + detail::unique_token();
    std::vector<std::string> suffixes, linked;
    bool stage_named = false;
    std::optional<BestRanking> previous_best;
    try {
      write(dir / stage);
      suffixes = detail::staged_checkpoint_suffixes(dir, stage);
      if (score && self().ranked_ && self().best_.ranks(*score)) {
        previous_best = self().best_;
        self().best_.insert(name, step, *score);
      }

      // This save supersedes an older one at the same step, and a staging copy of one that the
      // state named while it was being replaced (a save killed then).
      std::vector<CheckpointEntry> entries = self().entries_;
      std::vector<std::string> dropped;
      std::erase_if(entries, [&](const CheckpointEntry& e) {
        if (is_staging_name_of(e.name, name)) dropped.push_back(e.name);
        return e.name == name || is_staging_name_of(e.name, name);
      });
      entries.push_back({name, timestamp});
      double mark = self().last_preserved_;
      for (std::string& d : self().retain(entries, mark)) dropped.push_back(std::move(d));
      for (const std::string& d : dropped) self().add_pending(d);

      if (!self().names(name)) {
        // Files of exactly these names can only be a killed save's, at this step, that no state
        // named: they make way for the new links.
        for (const std::string& suffix : suffixes) detail::remove_file(dir / (name + suffix));
        link_all(stage, name, suffixes, linked);
        self().suffixes_[name] = suffixes;
        commit(entries, mark, /*names_first=*/true);  // the links durable before the state
      } else {
        // The state names an older checkpoint at this step: name the staging copy meanwhile.
        std::vector<CheckpointEntry> staged = entries;
        staged.back().name = stage;
        self().suffixes_[stage] = suffixes;
        self().add_pending(name);
        commit(staged, mark, /*names_first=*/true);  // the staging names durable first
        stage_named = true;
        self().remove_pending();
        for (const std::string& suffix : suffixes) detail::remove_file(dir / (name + suffix));
        self().suffixes_[name] = suffixes;
        link_all(stage, name, suffixes, linked);
        commit(entries, mark, /*names_first=*/true);
        stage_named = false;
      }
      linked.clear();
      for (const std::string& suffix : suffixes) detail::remove_file_quietly(dir / (stage + suffix));
      if (deletion == DeleteDropped::in_background)
        self().start_deletions();
      else
        self().remove_pending();
    } catch (const std::exception& e) {
      if (previous_best) self().best_ = std::move(*previous_best);
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
    if (self().options_.keep_checkpoint_every_n_hours) state.last_preserved_timestamp = mark;
    std::vector<std::string>& pending = self().pending_;
    std::erase_if(pending, [&](const std::string& p) {
      return std::any_of(entries.begin(), entries.end(),
                         [&](const CheckpointEntry& e) { return e.name == p; });
    });
    state.pending_deletions = pending;
    std::erase_if(self().suffixes_, [&](const auto& item) {
      return std::find(pending.begin(), pending.end(), item.first) == pending.end() &&
             std::none_of(entries.begin(), entries.end(),
                          [&](const CheckpointEntry& e) { return e.name == item.first; });
    });
    state.file_suffixes = self().suffixes_;
    const auto listed = [&](const std::string& name) {
      return std::any_of(entries.begin(), entries.end(),
                         [&](const CheckpointEntry& e) { return e.name == name; });
    };
    for (const CheckpointStateScore& other : self().other_scores_)
      if (listed(other.name)) state.scores.push_back(other);
    for (const ScoredCheckpoint& best : self().best_.kept())
      if (listed(best.name))
        state.scores.push_back({best.name, self().best_.ranking().monitor, best.score});
    detail::replace_checkpoint_state(self().options_.checkpoint_dir, state, names_first);
    self().entries_ = entries;
    self().latest_ = entries.back().name;
    self().last_preserved_ = mark;
    self().disk_pending_ = pending;
  }

  void link_all(const std::string& stage, const std::string& name,
                const std::vector<std::string>& suffixes, std::vector<std::string>& linked) {
    const std::filesystem::path& dir = self().options_.checkpoint_dir;
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

  // Whether `candidate` is ".<name>.tmp-<16 hex digits>".
  static bool is_staging_name_of(std::string_view candidate, std::string_view name) {
    constexpr std::string_view tmp = ".tmp-";
    return candidate.size() == 1 + name.size() + tmp.size() + 16 && candidate[0] == '.' &&
           candidate.substr(1, name.size()) == name &&
           candidate.substr(1 + name.size(), tmp.size()) == tmp;
  }
};

}  // namespace runhooks::detail
