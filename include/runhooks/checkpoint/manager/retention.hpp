// Which checkpoints a CheckpointManager keeps (TensorFlow's Saver: max_to_keep,
// keep_checkpoint_every_n_hours) and how it deletes those it drops: only files proven to be their
// own, now or on a thread of their own.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/checkpoint/manager/options.hpp>
#include <runhooks/log.hpp>

namespace runhooks::detail {

// Retention and deletion. The state file stops naming a dropped checkpoint and records it as
// pending deletion before any of its files goes (ManagerCommit::commit), so a process killed
// while deleting leaves files the next open() removes. A base of CheckpointManager (Manager),
// whose members it reads through self(); it holds nothing itself.
template <class Manager>
class ManagerRetention {
 protected:
  Manager& self() noexcept { return static_cast<Manager&>(*this); }
  const Manager& self() const noexcept { return static_cast<const Manager&>(*this); }

  // Waits for the deletion a save with DeleteDropped::in_background started, if any. A file it
  // could not delete was logged and stays pending (the next save tries again); nothing throws.
  void wait_for_deletions() noexcept {
    if (!self().deleting_.valid()) return;
    try {
      for (const std::string& name : self().deleting_.get()) std::erase(self().pending_, name);
    } catch (...) {  // out of memory in the deleter: what it did not report stays pending
    }
  }

  // Whether a deletion is still running in the background.
  bool deleting() const {
    return self().deleting_.valid() &&
           self().deleting_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  }

  // TensorFlow's Saver: beyond max_to_keep the oldest saves leave the list; each is deleted unless
  // it is the first one dated past the keep_checkpoint_every_n_hours mark, which is then kept (but
  // no longer named) and moves the mark on by that period. A scored checkpoint in the top k (or
  // scored for another metric, Manager::scored) stays named and is never dropped: the state keeps
  // the latest max_to_keep and the best k, their union. With max_to_keep 0 nothing is deleted
  // and the list holds only the newest and the scored. Unlike Saver, which drops one per save,
  // this drops all the excess (a run restarted with a smaller max_to_keep). Returns the names to
  // delete.
  std::vector<std::string> retain(std::vector<CheckpointEntry>& entries, double& mark) const {
    std::vector<std::string> dropped;
    const std::size_t latest = static_cast<std::size_t>(self().options_.max_to_keep);
    const std::size_t window = latest == 0 ? 1 : latest;
    if (entries.size() <= window) return dropped;
    const std::size_t excess = entries.size() - window;
    std::vector<CheckpointEntry> kept;
    kept.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      CheckpointEntry& entry = entries[i];
      if (i >= excess || self().scored(entry.name)) {
        kept.push_back(std::move(entry));
        continue;
      }
      if (latest == 0) continue;  // kept, no longer named
      if (self().options_.keep_checkpoint_every_n_hours) {
        const double period = *self().options_.keep_checkpoint_every_n_hours * 3600.0;
        if (entry.timestamp > mark + period) {
          mark += period;
          continue;
        }
      }
      dropped.push_back(std::move(entry.name));
    }
    entries = std::move(kept);
    return dropped;
  }

  // Deletes the files of every pending checkpoint the state does not name; those that cannot be
  // deleted stay pending.
  void remove_pending() {
    std::erase_if(self().pending_,
                  [&](const std::string& p) { return !self().names(p) && remove_checkpoint(p); });
  }

  // The same, on a thread of its own (DeleteDropped::in_background). What to delete is decided
  // here, on the caller's thread, with the same proof; the thread only unlinks those files, and
  // wait_for_deletions() takes what it removed off the pending list. Without a thread, here.
  void start_deletions() {
    using Work = std::vector<std::pair<std::string, std::vector<std::string>>>;
    auto work = std::make_shared<Work>();
    std::erase_if(self().pending_, [&](const std::string& p) {
      if (self().names(p)) return false;
      std::optional<std::vector<std::string>> files = files_to_remove(p);
      if (!files) return true;  // nothing of it is ours to delete
      work->emplace_back(p, std::move(*files));
      return false;
    });
    if (work->empty()) return;
    try {
      self().deleting_ = std::async(std::launch::async, [dir = self().options_.checkpoint_dir, work] {
        std::vector<std::string> removed;
        for (const auto& [name, files] : *work)
          if (remove_files(dir, files)) removed.push_back(name);
        return removed;
      });
    } catch (const std::system_error&) {  // no thread to be had
      for (const auto& [name, files] : *work)
        if (remove_files(self().options_.checkpoint_dir, files)) std::erase(self().pending_, name);
    }
  }

  // Deletes the files of checkpoint `name` that checkpoint_files.hpp proves are its own. Returns
  // false when one of them could not be removed (logged; it stays pending).
  bool remove_checkpoint(const std::string& name) {
    const std::optional<std::vector<std::string>> files = files_to_remove(name);
    return !files || remove_files(self().options_.checkpoint_dir, *files);
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
    const std::filesystem::path& dir = self().options_.checkpoint_dir;
    if (!detail::is_plain_file_name(name)) {
      log(Severity::warning, "runhooks: the checkpoint state file of " + detail::quoted_path(dir) +
                                 " named '" + name + "', which is not a checkpoint in that "
                                 "directory: its files, if any, are left in place.");
      return std::nullopt;
    }
    std::vector<std::string> files =
        detail::checkpoint_files(dir, name, self().recorded_suffixes(name));
    // Name what looks like this checkpoint's yet was not deleted, unless it is another one's
    // (model.ckpt-40.arrays is not model.ckpt's).
    const auto another_checkpoints = [&](const std::string& file) {
      const auto longer = [&](const std::string& other) {
        return other.size() > name.size() && detail::belongs_to_prefix(file, other);
      };
      return std::any_of(self().pending_.begin(), self().pending_.end(), longer) ||
             std::any_of(self().entries_.begin(), self().entries_.end(),
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
};

}  // namespace runhooks::detail
