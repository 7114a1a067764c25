// CheckpointSaverHook: TensorFlow's hook that saves checkpoints every N steps or T seconds, with
// listeners, atomic commits and retention (CheckpointManager), and saves on a background thread
// for backends that can snapshot their state.
#pragma once

#include <runhooks/detail/config.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

#include <runhooks/checkpoint/checkpoint_manager.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/detail/saves_in_flight.hpp>
#include <runhooks/checkpoint/saver/background_writer.hpp>
#include <runhooks/checkpoint/saver/listeners.hpp>
#include <runhooks/checkpoint/saver/options.hpp>
#include <runhooks/checkpoint/saver/trigger.hpp>
#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/describe_exception.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/hook_state.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/summary/event_writer.hpp>

namespace runhooks {

namespace detail {

inline double system_seconds() noexcept {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace detail

// Saves a checkpoint of a Checkpointable backend (see checkpointable.hpp) into checkpoint_dir,
// with TensorFlow's algorithm:
//   begin()                  creates checkpoint_dir if missing and checks that it can be
//                            written (a CheckpointError here, at session creation, not hours
//                            later), reads the state file (retention continues from it);
//   after_create_session()   saves at the current global step (also after every recovery);
//   after_run()              saves when the timer triggers for the global step after the step
//                            (every save_steps steps, or save_secs seconds, since the last save);
//   end()                    saves the last step unless it was just saved, then every listener's end.
// After each committed save the hook appends SessionLog{CHECKPOINT, checkpoint_path:
// <checkpoint_dir>/<basename>} at the saved step to checkpoint_dir's event file, as TensorFlow's
// hook does (the directory's one file in the process, EventFileWriterCache: summaries written to
// checkpoint_dir share it), and flushes it. A failure to write it is logged, never raised: the
// checkpoint is saved all the same.
// TensorFlow's hook fetches the stale global step and re-reads it before deciding; runhooks reads
// global_step() after the step, which is what the re-read gives, so the steps are TensorFlow's.
//
// A Snapshottable backend is saved asynchronously (unless async_save is false): the step that
// triggers a save pays for the snapshot and for starting a thread; the thread writes and
// commits. A SnapshottableInPlace backend fills the one Snapshot the hook keeps for its lifetime
// (made at the first save, the one at session creation; the hook frees it when destroyed), so
// that a save in the loop pays for a copy into memory already mapped. At most one save is in
// flight: the next waits for it, or is skipped with a log line (when_save_in_flight), so the kept
// Snapshot is never filled while it is being written. A background error is raised by the next
// run() (from after_run) or by close() (from end()), once; end() waits for the last save. A save
// that fails leaves the state file and the checkpoints it names as they were. A synchronous save
// returns once the checkpoint is committed; the checkpoint that retention drops is deleted on a
// thread of its own (CheckpointManager's DeleteDropped::in_background), done before the next
// save and by end().
//
// Hook state (hook_state.hpp): in a session with stateful hooks (EarlyStoppingHook, ...), each
// save writes their states to <checkpoint>.hooks, read on the step that saves (after the hooks
// declared before this one; a stateful hook declared after it is a compile error), and committed
// with the backend's files: one state file names both, so a checkpoint never has the one without
// the other. ChiefSessionCreator restores them. Without stateful hooks no such file is written.
//
// Per step: with save_steps, one load of the next save step and one compare with the global step,
// as StopAtStepHook; with save_secs, one call that reads the clock (as TensorFlow does).
// C is the clock of save_secs; a clock other than SteadyClock (ManualClock in tests) also dates
// the checkpoints, as TensorFlow's mocked time.time() does.
//
// The hook holds its manager, timer, listeners and the state of its saves (the members at the
// end); its private bases, which hold nothing, add what it does with them:
//   saver/trigger.hpp            SaverTrigger: when to look next, and TensorFlow's trigger;
//   saver/background_writer.hpp  SaverBackgroundWriter: the kept snapshot, the saver thread;
//   saver/listeners.hpp          SaverListeners: calling the listeners' points.
template <Clock C = SteadyClock, class... Listeners>
class CheckpointSaverHook
    : detail::SaverTrigger<CheckpointSaverHook<C, Listeners...>>,
      detail::SaverBackgroundWriter<CheckpointSaverHook<C, Listeners...>>,
      detail::SaverListeners<CheckpointSaverHook<C, Listeners...>> {
  using Trigger = detail::SaverTrigger<CheckpointSaverHook>;
  using Writer = detail::SaverBackgroundWriter<CheckpointSaverHook>;
  using Listening = detail::SaverListeners<CheckpointSaverHook>;
  friend Trigger;
  friend Writer;
  friend Listening;
  using Trigger::on_trigger;
  using Trigger::rearm;
  using Writer::take_snapshot;
  using Writer::start_async;
  using Writer::finish_in_flight;
  using Writer::join_in_flight;
  using Listening::call_begin;
  using Listening::call_before_save;
  using Listening::call_end;
  using Listening::after_save;

 public:
  explicit CheckpointSaverHook(const CheckpointSaverOptions& options, Listeners... listeners)
      : CheckpointSaverHook(options, C{}, std::move(listeners)...) {}

  CheckpointSaverHook(const CheckpointSaverOptions& options, C clock, Listeners... listeners)
      : manager_({.checkpoint_dir = std::filesystem::path(options.validate().checkpoint_dir),
                  .basename = std::string(options.basename),
                  .max_to_keep = options.max_to_keep,
                  .keep_checkpoint_every_n_hours = options.keep_checkpoint_every_n_hours}),
        timer_(TimerOptions{.every_secs = options.save_secs, .every_steps = options.save_steps},
               std::move(clock)),
        listeners_(std::move(listeners)...),
        save_steps_(options.save_steps.value_or(0)),
        async_(options.async_save),
        skip_when_busy_(options.when_save_in_flight == WhenSaveInFlight::skip),
        checkpoint_path_((std::filesystem::path(options.checkpoint_dir) / options.basename).string()),
        checkpoint_dir_(options.checkpoint_dir), basename_(options.basename), options_(options) {
    view_own_strings();
  }
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names CheckpointSaverOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                CheckpointSaverOptions, &CheckpointSaverOptions::checkpoint_dir,
                &CheckpointSaverOptions::save_steps, &CheckpointSaverOptions::save_secs,
                &CheckpointSaverOptions::basename, &CheckpointSaverOptions::max_to_keep,
                &CheckpointSaverOptions::keep_checkpoint_every_n_hours,
                &CheckpointSaverOptions::async_save, &CheckpointSaverOptions::when_save_in_flight,
                &CheckpointSaverOptions::checked>>
  explicit CheckpointSaverHook(...) = delete;  // Misspelt field? Write CheckpointSaverOptions{...} to see which

  // Moving waits for a save in flight (its thread refers to this object); its outcome moves along.
  CheckpointSaverHook(CheckpointSaverHook&& other)
      : manager_((other.join_in_flight(), std::move(other.manager_))),
        timer_(std::move(other.timer_)),
        sampler_(other.sampler_),
        listeners_(std::move(other.listeners_)),
        next_check_(other.next_check_),
        async_next_check_(other.async_next_check_.load(std::memory_order_relaxed)),
        save_steps_(other.save_steps_),
        async_(other.async_),
        skip_when_busy_(other.skip_when_busy_),
        scored_request_(other.scored_request_),
        last_saved_step_(other.last_saved_step_),
        in_flight_(std::move(other.in_flight_)),
        kept_snapshot_(std::move(other.kept_snapshot_)),
        kept_snapshot_type_(other.kept_snapshot_type_),
        directory_key_(std::move(other.directory_key_)),
        hook_states_(other.hook_states_),
        events_(std::move(other.events_)),
        checkpoint_path_(std::move(other.checkpoint_path_)),
        checkpoint_dir_(std::move(other.checkpoint_dir_)),
        basename_(std::move(other.basename_)),
        options_(other.options_) {
    view_own_strings();
  }
  CheckpointSaverHook& operator=(CheckpointSaverHook&&) = delete;

  // A save still in flight is waited for; its error, which no run() or close() can raise any
  // more, is logged.
  ~CheckpointSaverHook() {
    join_in_flight();
    if (in_flight_ && in_flight_->error)
      log(Severity::warning, "runhooks: CheckpointSaverHook: a background save failed after the "
                             "last run() and no close() raised it: " +
                                 detail::describe_exception(in_flight_->error));
  }

  void begin() {
    manager_.open(wall_now());
    directory_key_ = detail::directory_key(manager_.directory());
    events_ = EventFileWriterCache::get(manager_.directory());
    std::apply([](auto&... l) { (call_begin(l), ...); }, listeners_);
  }

  template <class Backend>
  void after_create_session(Backend& session) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::CheckpointSaverHook needs a backend with `std::int64_t global_step() "
                  "const`; the backend type is named in this instantiation.");
    static_assert(detail::check_checkpointable_for_saver<Backend>::value);
    static_assert(detail::check_snapshot_for_saver<Backend>::value);
    static_assert((... && detail::check_listener<Listeners, Backend>::value));
    if constexpr (HasGlobalStep<Backend> && Checkpointable<Backend>) {
      finish_in_flight(session, /*wait=*/true);
      const auto step = static_cast<std::int64_t>(session.global_step());
      save(session, step);  // TensorFlow ignores a listener's stop request here too
      timer_.update_last_triggered_step(step);
      rearm(step);
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (HasGlobalStep<Backend> && Checkpointable<Backend>) {
      const std::int64_t step = detail::global_step_of(run_context);
      // Only a backend that can be saved in the background needs the atomic (its saver thread
      // sets it when done); compilers fold a plain load into the compare, not an atomic one.
      std::int64_t next_check;
      if constexpr (Snapshottable<Backend>)
        next_check = async_next_check_.load(std::memory_order_relaxed);
      else
        next_check = next_check_;
      if (step >= next_check) [[unlikely]] {
        if (on_trigger(run_context.session(), step)) run_context.request_stop();
      }
    }
  }

  template <class Backend>
  void end(Backend& session) {
    if constexpr (HasGlobalStep<Backend> && Checkpointable<Backend>) {
      finish_in_flight(session, /*wait=*/true);
      const auto last_step = static_cast<std::int64_t>(session.global_step());
      if (last_step != last_saved_step_) save_now(session, last_step);
      std::apply([&](auto&... l) { (call_end(l, session, last_step), ...); }, listeners_);
      // The directory's last pending-deletion line goes, and its lock: the next session (or
      // process) may write it. A hook left without end() closes when it is destroyed.
      manager_.close();
    }
  }

  // The session gives the states of its stateful hooks (session/hook_states.hpp), or an empty
  // access when it ends.
  void attach_hook_states(HookStateAccess access) noexcept { hook_states_ = access; }

  // BestCheckpointHook's part (best_checkpoint_hook.hpp). rank_by: the manager ranks scored
  // saves (waits for the thread of a save in flight first). request_scored_save: save at `step`
  // with `score`, in this hook's after_run of that step (the requesting hook is declared before
  // this one), as the one save of the step if the periodic trigger fires too. Nothing on a step
  // without a request.
  void rank_by(CheckpointRanking ranking) {
    join_in_flight();
    manager_.rank_by(std::move(ranking));
  }
  void request_scored_save(std::int64_t step, double score) noexcept {
    scored_request_.emplace(step, score);
    next_check_ = always;
    async_next_check_.store(always, std::memory_order_relaxed);
  }

  // The checkpoints the state file names, oldest first. Not while a save is in flight.
  const std::vector<CheckpointEntry>& checkpoints() const noexcept { return manager_.checkpoints(); }
  const CheckpointManager& manager() const noexcept { return manager_; }
  std::optional<std::int64_t> last_saved_step() const noexcept { return last_saved_step_; }
  // Whether a background save is in flight (started and not yet collected by after_run, end() or
  // after_create_session), and whether that one has finished writing.
  bool save_in_flight() const noexcept { return in_flight_ != nullptr; }
  bool save_in_flight_finished() {
    std::lock_guard lock(mutex_);
    return in_flight_ && in_flight_->done;
  }
  // The options as given; their checkpoint_dir and basename view strings the hook holds.
  const CheckpointSaverOptions& options() const noexcept { return options_; }
  // options().checkpoint_dir as a path: where the checkpoints and the state file are.
  const std::filesystem::path& checkpoint_dir() const noexcept { return manager_.directory(); }
  // The listeners, in the order given.
  std::tuple<Listeners...>& listeners() noexcept { return listeners_; }
  C& clock() noexcept { return timer_.clock(); }

 private:
  static constexpr std::int64_t always = std::numeric_limits<std::int64_t>::min();

  using InFlight = detail::SaverInFlight;

  void view_own_strings() noexcept {
    options_.checkpoint_dir = checkpoint_dir_;
    options_.basename = basename_;
  }


  double wall_now() {
    if constexpr (std::is_same_v<C, SteadyClock>)
      return detail::system_seconds();
    else
      return static_cast<double>(timer_.clock().now());
  }

  // The hooks' states now, on the session's thread; empty without stateful hooks.
  std::string hook_states() const {
    return hook_states_ ? hook_states_.encode(hook_states_.session) : std::string();
  }

  // Beside the backend's files, under the same staging prefix: committed with them.
  static void write_hook_states(const std::filesystem::path& prefix, const std::string& states) {
    if (!states.empty())
      detail::write_file_durably(prefix.string() + std::string(hook_state_suffix), states);
  }

  template <class Backend>
  bool save(Backend& session, std::int64_t step, std::optional<double> score = std::nullopt) {
    if constexpr (Snapshottable<Backend>) {
      if (async_) {
        std::apply([&](auto&... l) { (call_before_save(l, session, step), ...); }, listeners_);
        // No save is in flight here (after_create_session, end() and on_trigger collect it
        // first, or skip), so the kept snapshot is nobody else's.
        if constexpr (SnapshottableInPlace<Backend>)
          start_async(detail::KeptSnapshotWrite<snapshot_t<Backend>>{take_snapshot(session)}, step,
                      wall_now(), hook_states(), score);
        else
          start_async(session.snapshot(), step, wall_now(), hook_states(), score);
        last_saved_step_ = step;
        return false;  // after_save once the write is done
      }
    }
    return save_now(session, step, score);
  }

  template <class Backend>
  bool save_now(Backend& session, std::int64_t step, std::optional<double> score = std::nullopt) {
    std::apply([&](auto&... l) { (call_before_save(l, session, step), ...); }, listeners_);
    // The step waits for the commit, not for the blocks of the checkpoint retention drops.
    const std::string states = hook_states();
    const std::filesystem::path prefix = manager_.save(
        step, wall_now(),
        [&](const std::filesystem::path& p) {
          session.save(p);
          write_hook_states(p, states);
        },
        DeleteDropped::in_background, score);
    log(Severity::info, "runhooks: saved checkpoint " + prefix.string());
    note_checkpoint(step);
    last_saved_step_ = step;
    return after_save(session, step);
  }

  // TensorFlow's add_session_log(SessionLog(status=CHECKPOINT, checkpoint_path=save_path), step)
  // after each save. Also called on the saver thread: the event writer is thread-safe.
  void note_checkpoint(std::int64_t step) noexcept {
    if (!events_) return;  // begin() was not called
    try {
      try {
        events_->add_checkpoint(step, checkpoint_path_);
        events_->flush();
      } catch (const std::exception& e) {  // another holder closed the shared file
        log(Severity::warning, "runhooks: CheckpointSaverHook: no SessionLog CHECKPOINT for step " +
                                   std::to_string(step) + ": " + e.what());
      }
    } catch (...) {  // the log sink threw, or out of memory: nothing more can be said
    }
  }

  CheckpointManager manager_;
  SecondOrStepTimer<C> timer_;
  detail::ClockSampler sampler_;  // save_secs: when to read the clock next
  [[no_unique_address]] std::tuple<Listeners...> listeners_;
  // The per-step check: after_run looks further only at or past this global step. The atomic
  // copy is the one read for a Snapshottable backend: a background save that finished sets it
  // to `always`, so that the next after_run collects it.
  std::int64_t next_check_ = always;
  std::atomic<std::int64_t> async_next_check_{always};
  std::int64_t save_steps_;  // 0 with save_secs
  bool async_;
  bool skip_when_busy_;
  std::optional<std::pair<std::int64_t, double>> scored_request_;  // request_scored_save's
  std::optional<std::int64_t> last_saved_step_;
  std::unique_ptr<InFlight> in_flight_;
  // The SnapshottableInPlace backend's snapshot, kept between saves; its type is known only to
  // after_create_session (the hook is not a template on the backend), hence the erased deleter
  // and a tag per type. Declared after manager_: a move joins the save in flight first.
  using KeptSnapshot = std::unique_ptr<void, void (*)(void*)>;
  template <class Snapshot>
  static constexpr char kept_snapshot_tag = 0;
  KeptSnapshot kept_snapshot_{nullptr, [](void*) {}};
  const char* kept_snapshot_type_ = nullptr;
  std::mutex mutex_;
  std::string directory_key_;
  HookStateAccess hook_states_;  // the session's stateful hooks, while a session holds this hook
  std::shared_ptr<EventFileWriter> events_;  // checkpoint_dir's event file, from begin()
  std::string checkpoint_path_;              // TensorFlow's save path: <checkpoint_dir>/<basename>
  // The options as given, for options(): the caller's string_views may not outlive the hook, so
  // they view these two strings instead (again after a move, which may relocate them).
  std::string checkpoint_dir_;
  std::string basename_;
  CheckpointSaverOptions options_;
};

}  // namespace runhooks
