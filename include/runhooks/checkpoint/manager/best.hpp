// Best-k checkpoints by a score: which scored checkpoints a CheckpointManager keeps besides the
// latest max_to_keep (Lightning's ModelCheckpoint save_top_k, Keras' initial_value_threshold).
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <runhooks/detail/checked.hpp>

namespace runhooks {

// How a CheckpointManager ranks scored saves (BestCheckpointHook sets it on its saver's manager).
struct CheckpointRanking {
  std::string monitor;         // the metric's name, recorded with each score in the state file
  std::int64_t save_top_k = 1;  // -1: every scored save is kept; 0: none
  bool higher_is_better = false;
  std::optional<double> initial_value_threshold{};  // a score must beat it (strictly) to rank

  const CheckpointRanking& validate() const {
    if (monitor.empty() || monitor.find_first_of("\"\\\n\r") != std::string::npos)
      throw std::invalid_argument(
          "runhooks: CheckpointRanking::monitor must be a metric name without quotes, "
          "backslashes or line breaks, got '" + monitor + "'.");
    if (save_top_k < -1)
      throw std::invalid_argument("runhooks: save_top_k must be -1 (keep all), 0 or more, got " +
                                  std::to_string(save_top_k) + ".");
    if (initial_value_threshold && std::isnan(*initial_value_threshold))
      throw std::invalid_argument("runhooks: initial_value_threshold must be a number, got nan.");
    return *this;
  }
};

// A kept best checkpoint: its prefix (an own name in the state file, or joined to the directory
// by best_checkpoint()), its global step and its score (NaN as recorded).
struct ScoredCheckpoint {
  std::string name;
  std::int64_t step;
  double score;
  friend bool operator==(const ScoredCheckpoint& a, const ScoredCheckpoint& b) {
    return a.name == b.name && a.step == b.step &&
           (a.score == b.score || (std::isnan(a.score) && std::isnan(b.score)));
  }
};

namespace detail {

// Lightning's top-k (ModelCheckpoint.check_monitor_top_k and _update_best_and_save), over the
// checkpoints in the order they entered it: with fewer than k a score enters; otherwise it must
// be strictly better than the k-th (the worst, the earliest entered among equals), which it
// displaces, so a tie never displaces. NaN ranks as the worst infinity (Lightning stores it as
// one), so it never displaces a number; +-inf rank as numbers. With initial_value_threshold a
// score must first be strictly better than it (Keras' save_best_only), which NaN never is.
class BestRanking {
 public:
  BestRanking() = default;
  explicit BestRanking(CheckpointRanking ranking) : ranking_(std::move(ranking.validate())) {}

  const CheckpointRanking& ranking() const noexcept { return ranking_; }
  const std::vector<ScoredCheckpoint>& kept() const noexcept { return kept_; }
  bool empty() const noexcept { return kept_.empty(); }

  bool contains(const std::string& name) const noexcept {
    for (const ScoredCheckpoint& c : kept_)
      if (c.name == name) return true;
    return false;
  }

  // Whether a save scored `score` enters the top k.
  bool ranks(double score) const noexcept {
    if (ranking_.save_top_k == 0) return false;
    if (ranking_.initial_value_threshold && !better(score, *ranking_.initial_value_threshold))
      return false;
    if (ranking_.save_top_k < 0 || kept_.size() < static_cast<std::size_t>(ranking_.save_top_k))
      return true;
    return better(score, kept_[kth()].score);
  }

  // Adds checkpoint `name` (which ranks) in place of the k-th when the top k is full; returns
  // the displaced name, if any. A name already kept (a save at a step saved before) is replaced.
  std::optional<std::string> insert(std::string name, std::int64_t step, double score) {
    std::erase_if(kept_, [&](const ScoredCheckpoint& c) { return c.name == name; });
    std::optional<std::string> displaced;
    if (ranking_.save_top_k > 0 && kept_.size() >= static_cast<std::size_t>(ranking_.save_top_k)) {
      const std::size_t k = kth();
      displaced = kept_[k].name;
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(k));
    }
    kept_.push_back({std::move(name), step, score});
    return displaced;
  }

  // Restores one record of the state file, in its order; beyond k (a run restarted with a smaller
  // save_top_k) the k-th goes, as it would have, and is returned.
  std::optional<std::string> restore(ScoredCheckpoint checkpoint) {
    kept_.push_back(std::move(checkpoint));
    if (ranking_.save_top_k >= 0 && kept_.size() > static_cast<std::size_t>(ranking_.save_top_k)) {
      const std::size_t k = kth();
      std::string gone = kept_[k].name;
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(k));
      return gone;
    }
    return std::nullopt;
  }

  void erase(const std::string& name) {
    std::erase_if(kept_, [&](const ScoredCheckpoint& c) { return c.name == name; });
  }
  void clear() noexcept { kept_.clear(); }

  // The best: the first entered among the best scores (Lightning's min/max over its dict).
  std::optional<ScoredCheckpoint> best() const {
    if (kept_.empty()) return std::nullopt;
    std::size_t at = 0;
    for (std::size_t i = 1; i < kept_.size(); ++i)
      if (better(kept_[i].score, kept_[at].score)) at = i;
    return kept_[at];
  }

 private:
  // NaN as the worst infinity; strictly better, so equal keys never are.
  double key(double score) const noexcept {
    if (!std::isnan(score)) return score;
    return ranking_.higher_is_better ? -std::numeric_limits<double>::infinity()
                                     : std::numeric_limits<double>::infinity();
  }
  bool better(double a, double b) const noexcept {
    if (std::isnan(a)) return false;  // also against a NaN threshold-less worst
    return ranking_.higher_is_better ? key(a) > key(b) : key(a) < key(b);
  }
  // The k-th: the worst, the first entered among equals (Lightning's max/min over its dict).
  std::size_t kth() const noexcept {
    std::size_t at = 0;
    for (std::size_t i = 1; i < kept_.size(); ++i)
      if (better(kept_[at].score, kept_[i].score)) at = i;
    return at;
  }

  CheckpointRanking ranking_{.monitor = "-", .save_top_k = 0};
  std::vector<ScoredCheckpoint> kept_;
};

}  // namespace detail

}  // namespace runhooks
