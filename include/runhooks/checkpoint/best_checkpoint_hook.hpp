// BestCheckpointHook: saves a checkpoint when a monitored metric ranks in the top k, through the
// session's CheckpointSaverHook (Lightning's ModelCheckpoint(monitor, mode, save_top_k), Keras'
// save_best_only and initial_value_threshold).
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/manager/best.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/hooks/metric_mode.hpp>
#include <runhooks/keys.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

struct BestCheckpointOptions {
  // Unset: the hook's mode tag (metric_mode.hpp), else the key's declared direction
  // (DeclaresDirection), else min (Lightning's default); given beside a tag, it must agree with it.
  std::optional<MetricMode> mode{};
  // Lightning's save_top_k: how many best checkpoints are kept besides the latest max_to_keep.
  // -1 keeps every checkpoint saved for a value; 0 saves none for their value. Default 1.
  std::int64_t save_top_k = 1;
  // Keras' initial_value_threshold: a value must be strictly better than it to be saved. Not NaN.
  std::optional<double> initial_value_threshold{};
  // A check every this many runs of the session (the metric is fetched on those runs only; an
  // evaluation metric comes only on its evaluation steps whatever this says). At least 1.
  std::int64_t every_n_iter = 1;

  // std::invalid_argument naming the option and value; a compile error when constexpr.
  constexpr const BestCheckpointOptions& validate() const {
    if (save_top_k < -1) {
      if (std::is_constant_evaluated()) throw "runhooks: BestCheckpointOptions::save_top_k must be -1 (all), 0 or more";
      throw std::invalid_argument("runhooks: BestCheckpointOptions::save_top_k must be -1 (all), 0 or "
                                  "more, got " + std::to_string(save_top_k) + ".");
    }
    if (initial_value_threshold && *initial_value_threshold != *initial_value_threshold) {
      if (std::is_constant_evaluated()) throw "runhooks: BestCheckpointOptions::initial_value_threshold must not be NaN";
      throw std::invalid_argument(
          "runhooks: BestCheckpointOptions::initial_value_threshold must not be NaN, got nan.");
    }
    if (every_n_iter < 1) {
      if (std::is_constant_evaluated()) throw "runhooks: BestCheckpointOptions::every_n_iter must be at least 1";
      throw std::invalid_argument("runhooks: BestCheckpointOptions::every_n_iter must be at least 1, "
                                  "got " + std::to_string(every_n_iter) + ".");
    }
    return *this;
  }
  // validate(), and the mode against the direction key K declares (a compile error when constexpr).
  template <KeyType K>
  constexpr const BestCheckpointOptions& validate_for() const {
    validate();
    detail::resolve_mode<K>(mode, "BestCheckpointOptions::mode");
    return *this;
  }
};

template <KeyType MetricKey, HookMode Mode>
class BestCheckpointHook;

namespace detail {

template <class T>
inline constexpr bool is_checkpoint_saver = false;
template <Clock C, class... L>
inline constexpr bool is_checkpoint_saver<CheckpointSaverHook<C, L...>> = true;

template <class T>
inline constexpr bool is_best_checkpoint_hook = false;
template <class K, class M>
inline constexpr bool is_best_checkpoint_hook<BestCheckpointHook<K, M>> = true;

// A hook as the session holds it, or the hook inside an on/off wrapper (Conditional: hook_type).
template <class H>
struct hook_inside {
  using type = unwrap_hook_t<H>;
};
template <class H>
  requires requires { typename unwrap_hook_t<H>::hook_type; }
struct hook_inside<H> {
  using type = typename unwrap_hook_t<H>::hook_type;
};
template <class H>
using hook_inside_t = typename hook_inside<std::remove_cvref_t<H>>::type;

// The saver as BestCheckpointHook reaches it, without its clock and listener types.
struct SaverLink {
  void* saver = nullptr;
  void (*request)(void* saver, std::int64_t step, double score) noexcept = nullptr;
  const CheckpointManager& (*manager)(const void* saver) noexcept = nullptr;
  bool (*idle)(const void* saver) noexcept = nullptr;  // no save in flight
  explicit operator bool() const noexcept { return saver != nullptr; }
};

template <class Saver>
SaverLink link_to(Saver* saver) {
  if (saver == nullptr) return {};
  return {saver,
          [](void* s, std::int64_t step, double score) noexcept {
            static_cast<Saver*>(s)->request_scored_save(step, score);
          },
          [](const void* s) noexcept -> const CheckpointManager& {
            return static_cast<const Saver*>(s)->manager();
          },
          [](const void* s) noexcept { return !static_cast<const Saver*>(s)->save_in_flight(); }};
}

}  // namespace detail

// Saves a checkpoint at each run whose MetricKey value ranks in the top save_top_k of the values
// saved so far (Lightning's rule: fewer than k kept, or strictly better than the k-th, so a tie
// never displaces; NaN ranks as the worst value and never displaces a number; +-inf rank as
// numbers), and, with initial_value_threshold, is strictly better than it (Keras). The save is
// the session's CheckpointSaverHook's (its directory, lock, state file and manager: one writer),
// made in the saver's after_run of the same step, the step's one save when the saver's periodic
// trigger fires too; the checkpoint carries the value as its score in the state file. The saver's
// retention then keeps the latest max_to_keep and the best k, their union, so the newest
// checkpoint is never the one dropped: the k-th a better value displaces is deleted only after
// the new save is committed, only if it is not among the latest, and only under the saver's
// deletion rule (files proven to be that checkpoint's). The scores are in the state file
// (runhooks-score comment lines, which TensorFlow's parser skips), so a restart keeps ranking
// where the run that saved them was; they are this hook's state (no .hooks entry).
//
// Its session: a CheckpointSaverHook declared after it (a compile error otherwise, as for
// stateful hooks: the save runs in the saver's after_run), found by runhooks::link_hooks(session)
// once the session is made (make_training_session calls it: pass this hook in
// runhooks::chief_only(...), which come before the default saver). Linking has the saver's
// manager rank by this metric, including the scores its state file recorded. The first check of
// a hook never linked throws std::logic_error saying so; linked to a saver that is off (a
// worker's), it does nothing and fetches nothing.
//
// A run on which the metric is absent (fetch off, or an evaluation metric on a step that did not
// evaluate) is no check. Per silent step: one decrement and compare in before_run, one test of
// the optional in after_run. Only the chief decides (the saver is chief-only), where Lightning
// makes the decision unanimous across ranks.
//
// Differs from Lightning: checkpoints are saved only when they rank (Lightning saves on its own
// trigger and ranks then); the periodic saves are the saver's. Differs from Keras: a first NaN
// (or +inf in min mode) is saved when nothing is kept yet, as in Lightning (Keras' best starts at
// None, so it saves it and then never beats NaN).
template <KeyType MetricKey, HookMode Mode = ModeFromOptions>
class BestCheckpointHook {
  static_assert(sizeof(detail::mode_check_t<MetricKey, Mode>) > 0);  // a tag against the key
  static_assert(std::is_arithmetic_v<typename MetricKey::value_type>,
                "runhooks::BestCheckpointHook ranks a number: its key's value_type must be "
                "arithmetic.");

 public:
  explicit BestCheckpointHook(BestCheckpointOptions options = {})
      : options_(options.validate()),
        mode_(detail::resolve_mode<MetricKey, Mode>(options_.mode, "BestCheckpointOptions::mode")),
        runs_to_check_(options_.every_n_iter) {}
  // The mode in the type (metric_mode.hpp): `runhooks::BestCheckpointHook hook{runhooks::keys<Accuracy>,
  // runhooks::maximize, {...}}`. A key that declares the other direction is a compile error;
  // options.mode, if given, must agree with the tag (std::invalid_argument).
  BestCheckpointHook(Keys<MetricKey>, Mode, BestCheckpointOptions options = {})
    requires ModeTag<Mode>
      : BestCheckpointHook(options) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names BestCheckpointOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                BestCheckpointOptions, &BestCheckpointOptions::mode,
                &BestCheckpointOptions::save_top_k, &BestCheckpointOptions::initial_value_threshold,
                &BestCheckpointOptions::every_n_iter>>
  explicit BestCheckpointHook(...) = delete;  // Misspelt field? Write BestCheckpointOptions{...} to see which

  // runhooks::link_hooks: finds the session's one CheckpointSaverHook (by value, by std::ref, or
  // in an on/off wrapper), declared after this hook, and has its manager rank by this metric.
  template <class... Hooks>
  void link(Hooks&... hooks) {
    using detail::hook_inside_t;
    constexpr std::size_t savers = (0 + ... + detail::is_checkpoint_saver<hook_inside_t<Hooks>>);
    static_assert(savers == 1,
                  "runhooks::BestCheckpointHook saves through the session's CheckpointSaverHook: "
                  "give the session exactly one, declared after the BestCheckpointHook, held by "
                  "value, by std::ref or in runhooks::Conditional (runhooks::ChiefOnly hides it).");
    constexpr bool ordered = [] {
      constexpr bool saver[] = {detail::is_checkpoint_saver<hook_inside_t<Hooks>>..., false};
      constexpr bool best[] = {detail::is_best_checkpoint_hook<hook_inside_t<Hooks>>..., false};
      bool saver_seen = false;
      for (std::size_t i = 0; i < sizeof...(Hooks); ++i) {
        if (best[i] && saver_seen) return false;
        saver_seen = saver_seen || saver[i];
      }
      return true;
    }();
    static_assert(ordered,
                  "runhooks::BestCheckpointHook must be declared before the CheckpointSaverHook "
                  "(its save runs in the saver's after_run of the same step); with "
                  "make_training_session, pass it in runhooks::chief_only(...).");
    if (linked_) return;  // linked once
    (link_one(hooks), ...);
    linked_ = true;
    off_ = !saver_;
    if (off_) runs_to_check_ = never;
  }

  void begin() { runs_to_check_ = off_ ? never : options_.every_n_iter; }

  // The ranking so far, from the saver's manager: what its state file recorded, and its saves.
  // With a save of an earlier session still in flight (the saver's after_create_session, after
  // this one, collects it) the ranking decided here, which includes it, stays.
  template <class Backend>
  void after_create_session(Backend&) {
    if (saver_ && saver_.idle(saver_.saver)) {
      ranking_ = saver_.manager(saver_.saver).ranking();
      basename_ = saver_.manager(saver_.saver).options().basename;
    }
  }

  template <class Ctx>
  auto before_run(Ctx&) {
    // As EarlyStoppingHook's: one decrement and compare (a hook linked to a saver that is off
    // counts from `never`).
    return SessionRunArgs{runhooks::fetch<MetricKey>(--runs_to_check_ <= 0)};
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) {
    if (const auto& value = run_values[MetricKey{}]; value.has_value()) [[unlikely]]
      check(static_cast<double>(*value), detail::global_step_of(run_context));
  }

  const BestCheckpointOptions& options() const noexcept { return options_; }
  // The mode in use: the tag's, else the options', else the key's declared direction, else min.
  MetricMode mode() const noexcept { return mode_; }
  // The best checkpoint so far, its prefix (<checkpoint_dir>/<basename>-<step>), step and score
  // (the first saved among equal scores, as Lightning's best_model_path); nullopt before any.
  // Includes a save requested at this step (the saver commits it in its after_run).
  std::optional<ScoredCheckpoint> best_checkpoint() const {
    std::optional<ScoredCheckpoint> best = ranking_.best();
    if (best && saver_)
      best->name = (saver_.manager(saver_.saver).directory() / best->name).string();
    return best;
  }
  // The kept best checkpoints, in the order they entered the top k (names in the directory).
  const std::vector<ScoredCheckpoint>& best_checkpoints() const noexcept { return ranking_.kept(); }

 private:
  template <class H>
  void link_one(H& hook) {
    using Inside = detail::hook_inside_t<H>;
    if constexpr (detail::is_checkpoint_saver<Inside>) {
      // link_hooks passes the session's hooks, which are not const; an on/off wrapper passes them
      // on as const references.
      auto& held = const_cast<std::remove_const_t<H>&>(hook);
      Inside* saver;
      if constexpr (std::is_same_v<detail::unwrap_hook_t<std::remove_const_t<H>>, Inside>)
        saver = &detail::unwrap(held);
      else
        saver = detail::unwrap(held).get();
      saver_ = detail::link_to(saver);
      if (saver) {
        saver->rank_by({.monitor = std::string(key_name<MetricKey>()),
                        .save_top_k = options_.save_top_k,
                        .higher_is_better = mode_ == MetricMode::max,
                        .initial_value_threshold = options_.initial_value_threshold});
        ranking_ = saver->manager().ranking();
        basename_ = saver->manager().options().basename;
      }
    }
  }

  // Rare: a run that brought the metric.
  [[gnu::noinline]] void check(double value, std::int64_t step) {
    runs_to_check_ = options_.every_n_iter;
    if (!linked_)
      throw std::logic_error(
          "runhooks: BestCheckpointHook<" + std::string(key_name<MetricKey>()) +
          "> is not linked to a CheckpointSaverHook: call runhooks::link_hooks(session) once "
          "the session is made (make_training_session does).");
    if (!saver_ || !ranking_.ranks(value)) return;
    ranking_.insert(basename_ + "-" + std::to_string(step), step, value);
    saver_.request(saver_.saver, step, value);
  }

  static constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

  BestCheckpointOptions options_;
  MetricMode mode_;
  std::int64_t runs_to_check_;
  bool linked_ = false;
  bool off_ = false;  // linked to a saver that is off: never fetches
  detail::SaverLink saver_;
  // The top k as decided on this thread: the manager's, plus the saves requested since (the
  // manager, perhaps writing on the saver's thread, ranks each the same way when it commits).
  detail::BestRanking ranking_;
  std::string basename_;
};

// The tag constructor deduces the hook type; this guide does too for braced options with a
// misspelt field, so that the catch-all constructor names the options type and its fields.
template <KeyType K, MetricMode M>
BestCheckpointHook(Keys<K>, MetricModeTag<M>, ...) -> BestCheckpointHook<K, MetricModeTag<M>>;

}  // namespace runhooks
