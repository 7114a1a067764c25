// What CheckpointManager::open does with a directory earlier runs left: reads the state file,
// the record retention carries on from, checks that the directory can be written, and removes
// what killed processes left there (only names runhooks can have made).
#pragma once

#include <runhooks/detail/config.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <sys/stat.h>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/detail/checkpoint_files.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/checkpoint/manager/best.hpp>
#include <runhooks/checkpoint/manager/options.hpp>
#include <runhooks/log.hpp>

namespace runhooks::detail {

// Resuming in a directory. A base of CheckpointManager (Manager), whose members it reads through
// self(); it holds nothing itself.
template <class Manager>
class ManagerResume {
 protected:
  Manager& self() noexcept { return static_cast<Manager&>(*this); }
  const Manager& self() const noexcept { return static_cast<const Manager&>(*this); }

  // Reads the state file, the record of earlier runs that retention carries on from: the
  // entries as this manager spells them, the suffixes recorded for its own checkpoints and the
  // pending deletions. `now` starts the keep_checkpoint_every_n_hours period when it has none.
  void load_state(double now) {
    const std::filesystem::path& dir = self().options_.checkpoint_dir;
    self().entries_.clear();
    self().latest_.reset();
    self().suffixes_.clear();
    self().pending_.clear();
    self().disk_pending_.clear();
    self().best_.clear();
    self().other_scores_.clear();
    const std::optional<CheckpointState> state = read_checkpoint_state(dir);
    if (state) {
      const std::size_t n = state->all_model_checkpoint_paths.size();
      const bool dated = state->all_model_checkpoint_timestamps.size() == n;
      for (std::size_t i = 0; i < n; ++i) {
        const std::string name = self().own_spelling(state->all_model_checkpoint_paths[i]);
        self().add_entry(
            {name, dated ? state->all_model_checkpoint_timestamps[i] : modification_time(name, now)});
      }
      const std::string latest = self().own_spelling(state->model_checkpoint_path);
      if (self().entries_.empty() || self().entries_.back().name != latest)
        self().add_entry({latest, modification_time(latest, now)});
      self().latest_ = latest;
      self().last_preserved_ = state->last_preserved_timestamp.value_or(now);
      for (const auto& [name, suffixes] : state->file_suffixes) {
        const std::optional<std::string> own = detail::own_checkpoint_name(self().key_, name);
        if (!own) continue;
        std::vector<std::string>& kept = self().suffixes_[*own];
        for (const std::string& suffix : suffixes)
          if (detail::is_valid_checkpoint_suffix(suffix) && !detail::is_reserved_file(*own + suffix))
            kept.push_back(suffix);
      }
      load_scores(*state, dir / checkpoint_state_filename);
      // A name the state still lists is not pending deletion, whatever a damaged line says.
      for (const std::string& pending : state->pending_deletions) {
        self().disk_pending_.push_back(self().own_spelling(pending));
        if (!self().names(self().disk_pending_.back())) self().add_pending(self().disk_pending_.back());
      }
    } else {
      self().last_preserved_ = now;
    }
  }

  // The runhooks-score records, strictly: each must name, once, a checkpoint of this directory
  // that the state lists, as <basename>-<step>; anything else is a CheckpointError naming the
  // file (a hostile record could otherwise make retention keep or drop what it likes). They are
  // kept as they are (their checkpoints never dropped) until rank_scores() ranks those of the
  // ranking's metric.
  void load_scores(const CheckpointState& state, const std::filesystem::path& file) {
    std::set<std::string> seen;
    for (const CheckpointStateScore& record : state.scores) {
      const std::optional<std::string> own = detail::own_checkpoint_name(self().key_, record.name);
      const std::optional<std::int64_t> step = own ? step_of(*own) : std::nullopt;
      const auto bad = [&](const char* why) {
        return CheckpointError("runhooks: checkpoint state file " + detail::quoted_path(file) +
                               ": the runhooks-score record of '" + record.name + "' " + why +
                               "; runhooks records scores only for its own checkpoints.");
      };
      if (!own || !step) throw bad("does not name a checkpoint <basename>-<step> of this directory");
      bool listed = false;
      for (const CheckpointEntry& e : self().entries_) listed = listed || e.name == *own;
      if (!listed) throw bad("names a checkpoint the state does not list");
      if (!seen.insert(*own).second) throw bad("appears twice");
      self().other_scores_.push_back({*own, record.metric, record.score});
    }
    if (self().ranked_) rank_scores();
  }

  // With a ranking: the records of its metric rank, in their order (beyond save_top_k, as after a
  // restart with a smaller one, the k-th goes each time: it is then only a checkpoint among the
  // others); those of another metric stay as they are, with a warning.
  void rank_scores() {
    std::vector<CheckpointStateScore> records = std::move(self().other_scores_);
    self().other_scores_.clear();
    self().best_.clear();
    std::string others;
    for (CheckpointStateScore& record : records) {
      if (record.metric == self().best_.ranking().monitor) {
        self().best_.restore({record.name, step_of(record.name).value_or(0), record.score});
      } else {
        others += (others.empty() ? "" : ", ") + record.name + " (" + record.metric + ")";
        self().other_scores_.push_back(std::move(record));
      }
    }
    if (!others.empty())
      log(Severity::warning,
          "runhooks: the checkpoint state file of " +
              detail::quoted_path(self().options_.checkpoint_dir) + " scores " + others +
              ", not by '" + self().best_.ranking().monitor +
              "': they are kept, unranked; delete them by hand if they are no longer wanted.");
  }

  // The step of own checkpoint name <basename>-<digits>, or nullopt.
  std::optional<std::int64_t> step_of(const std::string& name) const {
    const std::string& base = self().options_.basename;
    if (name.size() <= base.size() + 1 || name.compare(0, base.size(), base) != 0 ||
        name[base.size()] != '-')
      return std::nullopt;
    std::int64_t step = 0;
    const char* first = name.data() + base.size() + 1;
    const char* last = name.data() + name.size();
    const auto [end, error] = std::from_chars(first, last, step);
    if (error != std::errc{} || end != last || step < 0 || *first == '+') return std::nullopt;
    return step;
  }

  double modification_time(const std::string& name, double fallback) const {
    if (!detail::is_plain_file_name(name)) return fallback;
    const std::filesystem::path& dir = self().options_.checkpoint_dir;
    for (const std::string& file : detail::checkpoint_files(dir, name, self().recorded_suffixes(name))) {
      struct stat info {};
      if (::stat((dir / file).c_str(), &info) == 0)
        return static_cast<double>(info.st_mtim.tv_sec) +
               1e-9 * static_cast<double>(info.st_mtim.tv_nsec);
    }
    return fallback;
  }

  void probe_writable() {
    const std::filesystem::path probe =
        self().options_.checkpoint_dir / (".runhooks-probe-" + detail::unique_token());
    try {
      detail::write_file_durably(probe, "runhooks");
      detail::remove_file(probe);
    } catch (const CheckpointError& e) {
      detail::remove_file_quietly(probe);
      throw CheckpointError("runhooks: the checkpoint directory " +
                            detail::quoted_path(self().options_.checkpoint_dir) +
                            " cannot be written: " + e.what());
    }
  }

  // Removes what killed saves left: checkpoints the state records as pending deletion and no
  // longer names; staging files of saves the state does not name, with the final names linked to
  // them (the same inode: provably that save's); temporary state files and write probes. Only
  // names runhooks can have made (detail/checkpoint_files.hpp), and only regular files or links.
  void sweep() {
    const std::filesystem::path& dir = self().options_.checkpoint_dir;
    self().remove_pending();
    std::set<std::string> named;
    for (const CheckpointEntry& e : self().entries_) named.insert(e.name);
    if (self().latest_) named.insert(*self().latest_);
    for (const std::string& file : detail::names_starting_with(dir, "")) {
      if (detail::is_temporary_file_name(file)) {
        if (detail::is_file_or_link(dir / file)) detail::remove_file_quietly(dir / file);
        continue;
      }
      const std::size_t staged = detail::staging_prefix_length(file, self().options_.basename);
      if (staged == 0 || !detail::is_file_or_link(dir / file)) continue;
      const std::string stage = file.substr(0, staged);
      if (named.count(stage)) continue;
      const std::size_t name_size = stage.size() - 1 - std::string_view(".tmp-").size() - 16;
      const std::string name = stage.substr(1, name_size);  // of .<name>.tmp-<token>
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
};

}  // namespace runhooks::detail
