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
#include <runhooks/clock.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/hooks/second_or_step_timer.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_context.hpp>
#include <runhooks/summary/event_writer.hpp>

namespace runhooks {

// What a save does when the previous asynchronous one is still being written.
enum class WhenSaveInFlight {
  wait,  // wait for it, then save (no checkpoint is lost; the step waits)
  skip,  // skip this save with a log line (the step never waits; the next trigger saves)
};

namespace detail {

struct CheckedSaverOptions {};

// The checks of CheckpointSaverOptions, in a constant expression when the options are constexpr:
// a mistake is then a compile error showing the message below; at run time std::invalid_argument.
constexpr CheckedSaverOptions check_saver_options(std::string_view checkpoint_dir,
                                                  const std::optional<std::int64_t>& save_steps,
                                                  const std::optional<double>& save_secs,
                                                  std::string_view basename, int max_to_keep,
                                                  const std::optional<double>& every_n_hours) {
  if (checkpoint_dir.empty()) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::checkpoint_dir must name a directory";
    throw std::invalid_argument(
        "runhooks: CheckpointSaverOptions::checkpoint_dir must name a directory, got ''.");
  }
  // TensorFlow's messages (its SecondOrStepTimer raises them for CheckpointSaverHook).
  if (save_steps && save_secs) {
    if (std::is_constant_evaluated()) throw "Can not provide both every_secs and every_steps. (CheckpointSaverOptions: save_steps and save_secs are both set)";
    throw std::invalid_argument(
        "Can not provide both every_secs and every_steps. (CheckpointSaverOptions: save_steps = " +
        std::to_string(*save_steps) + ", save_secs = " + format_number(*save_secs) + ")");
  }
  if (!save_steps && !save_secs) {
    if (std::is_constant_evaluated()) throw "Either every_secs or every_steps should be provided. (CheckpointSaverOptions: set save_steps or save_secs)";
    throw std::invalid_argument(
        "Either every_secs or every_steps should be provided. (CheckpointSaverOptions: set "
        "save_steps or save_secs)");
  }
  if (save_steps && *save_steps < 1) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::save_steps must be at least 1";
    throw std::invalid_argument("runhooks: CheckpointSaverOptions::save_steps must be at least 1, got " +
                                std::to_string(*save_steps) + ".");
  }
  if (save_secs) checked_secs("CheckpointSaverOptions::save_secs", *save_secs, 0.0, true);
  if (basename.empty() || basename.find('/') != std::string_view::npos ||
      basename.front() == '.' || basename == "checkpoint") {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::basename must be a file name without '/', not starting with '.' and not 'checkpoint'";
    throw std::invalid_argument(
        "runhooks: CheckpointSaverOptions::basename must be a file name without '/', not "
        "starting with '.' and not 'checkpoint', got '" + std::string(basename) + "'.");
  }
  if (max_to_keep < 0) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::max_to_keep must be at least 0";
    throw std::invalid_argument("runhooks: CheckpointSaverOptions::max_to_keep must be at least 0, got " +
                                std::to_string(max_to_keep) + ".");
  }
  if (every_n_hours && !(*every_n_hours > 0.0 && *every_n_hours <= max_duration_secs / 3600.0)) {
    if (std::is_constant_evaluated()) throw "runhooks: CheckpointSaverOptions::keep_checkpoint_every_n_hours must be greater than 0 and at most 277777";
    throw std::invalid_argument(
        "runhooks: CheckpointSaverOptions::keep_checkpoint_every_n_hours must be greater than 0 "
        "and at most 277777, got " + format_number(*every_n_hours) + ".");
  }
  return {};
}

}  // namespace detail

struct CheckpointSaverOptions {
  std::string_view checkpoint_dir{};           // created if missing
  std::optional<std::int64_t> save_steps{};    // exactly one of these two (TensorFlow's rule)
  std::optional<double> save_secs{};
  std::string_view basename = "model.ckpt";    // checkpoints are <checkpoint_dir>/<basename>-<step>
  int max_to_keep = 5;                         // 0 keeps all
  std::optional<double> keep_checkpoint_every_n_hours{};  // unset: TensorFlow's 10000, i.e. never
  bool async_save = true;                      // on a background thread when the backend is Snapshottable
  WhenSaveInFlight when_save_in_flight = WhenSaveInFlight::wait;
  // Checks the fields above as the options are made, so options declared constexpr with a mistake
  // do not compile; at run time a mistake throws std::invalid_argument naming the field and value.
  // Never initialize it yourself.
  [[no_unique_address]] detail::CheckedSaverOptions checked = detail::check_saver_options(
      checkpoint_dir, save_steps, save_secs, basename, max_to_keep, keep_checkpoint_every_n_hours);

  // The same checks again, for options changed after they were made.
  constexpr const CheckpointSaverOptions& validate() const {
    detail::check_saver_options(checkpoint_dir, save_steps, save_secs, basename, max_to_keep,
                                keep_checkpoint_every_n_hours);
    return *this;
  }
};

// Checkpoint listeners (TensorFlow's CheckpointSaverListener) are policy types handed to the hook
// after its options. Each point is optional, found at compile time, and costs nothing if absent:
//   void begin()                                          in the hook's begin()
//   void before_save(auto& session, std::int64_t step)    before each save, on the training thread
//   bool after_save(auto& session, std::int64_t step)     after each save is durable; true asks the
//                                                         session to stop (void: never)
//   void end(auto& session, std::int64_t step)            in the hook's end(), after the final save
// An asynchronous save calls after_save on the training thread once the write is done: in the
// first after_run that sees it done, or in end().
template <class L>
concept ListenerHasBegin = requires(L& l) { l.begin(); };
template <class L, class B>
concept ListenerHasBeforeSave = requires(L& l, B& b, std::int64_t step) { l.before_save(b, step); };
template <class L, class B>
concept ListenerHasAfterSave = requires(L& l, B& b, std::int64_t step) {
  requires std::is_void_v<decltype(l.after_save(b, step))> ||
               std::convertible_to<decltype(l.after_save(b, step)), bool>;
};
template <class L, class B>
concept ListenerHasEnd = requires(L& l, B& b, std::int64_t step) { l.end(b, step); };

namespace detail {

// Does L have a member with this name, whatever its signature (as concepts.hpp finds hook points)?
#define RUNHOOKS_DETAIL_LISTENER_PROBE(point)                                             \
  struct listener_##point##_probe {                                                       \
    void point();                                                                         \
  };                                                                                      \
  template <class L>                                                                      \
  struct listener_##point##_probed : L, listener_##point##_probe {};                      \
  template <class L>                                                                      \
  concept listener_names_##point = std::is_class_v<L> && !std::is_final_v<L> &&           \
                                   !requires { &listener_##point##_probed<L>::point; };
RUNHOOKS_DETAIL_LISTENER_PROBE(begin)
RUNHOOKS_DETAIL_LISTENER_PROBE(before_save)
RUNHOOKS_DETAIL_LISTENER_PROBE(after_save)
RUNHOOKS_DETAIL_LISTENER_PROBE(end)
#undef RUNHOOKS_DETAIL_LISTENER_PROBE

template <class L, class B>
struct check_listener {
  static_assert(!listener_names_begin<L> || ListenerHasBegin<L>,
                "runhooks: a checkpoint listener's begin does not fit. Write `void begin()`.");
  static_assert(!listener_names_before_save<L> || ListenerHasBeforeSave<L, B>,
                "runhooks: a checkpoint listener's before_save does not fit. Write `void "
                "before_save(auto& session, std::int64_t global_step)`.");
  static_assert(!listener_names_after_save<L> || ListenerHasAfterSave<L, B>,
                "runhooks: a checkpoint listener's after_save does not fit. Write `bool "
                "after_save(auto& session, std::int64_t global_step)` (true requests a stop) or "
                "return void.");
  static_assert(!listener_names_end<L> || ListenerHasEnd<L, B>,
                "runhooks: a checkpoint listener's end does not fit. Write `void end(auto& "
                "session, std::int64_t global_step)`.");
  static_assert(ListenerHasBegin<L> || ListenerHasBeforeSave<L, B> ||
                    ListenerHasAfterSave<L, B> || ListenerHasEnd<L, B> ||
                    listener_names_begin<L> || listener_names_before_save<L> ||
                    listener_names_after_save<L> || listener_names_end<L>,
                "runhooks: a checkpoint listener defines none of begin, before_save, after_save, "
                "end; the listener type is named in this instantiation.");
  static constexpr bool value = true;
};

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
// Per step: with save_steps, one load of the next save step and one compare with the global step,
// as StopAtStepHook; with save_secs, one call that reads the clock (as TensorFlow does).
// C is the clock of save_secs; a clock other than SteadyClock (ManualClock in tests) also dates
// the checkpoints, as TensorFlow's mocked time.time() does.
template <Clock C = SteadyClock, class... Listeners>
class CheckpointSaverHook {
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
        last_saved_step_(other.last_saved_step_),
        in_flight_(std::move(other.in_flight_)),
        kept_snapshot_(std::move(other.kept_snapshot_)),
        kept_snapshot_type_(other.kept_snapshot_type_),
        directory_key_(std::move(other.directory_key_)),
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
                                 describe(in_flight_->error));
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

  struct InFlight {
    std::thread thread;
    std::int64_t step = 0;
    bool done = false;            // under mutex_
    std::exception_ptr error;     // under mutex_ until done
  };

  void view_own_strings() noexcept {
    options_.checkpoint_dir = checkpoint_dir_;
    options_.basename = basename_;
  }

  static std::string describe(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "an exception not derived from std::exception";
    }
  }

  double wall_now() {
    if constexpr (std::is_same_v<C, SteadyClock>)
      return detail::system_seconds();
    else
      return static_cast<double>(timer_.clock().now());
  }

  template <class L>
  static void call_begin(L& listener) {
    if constexpr (ListenerHasBegin<L>) listener.begin();
  }
  template <class L, class Backend>
  static void call_before_save(L& listener, Backend& session, std::int64_t step) {
    if constexpr (ListenerHasBeforeSave<L, Backend>) listener.before_save(session, step);
  }
  template <class L, class Backend>
  static bool call_after_save(L& listener, Backend& session, std::int64_t step) {
    if constexpr (ListenerHasAfterSave<L, Backend>) {
      if constexpr (std::is_void_v<decltype(listener.after_save(session, step))>) {
        listener.after_save(session, step);
      } else if (listener.after_save(session, step)) {
        log(Severity::info, "runhooks: a checkpoint listener requested that training be stopped "
                            "(after the save of step " + std::to_string(step) + ").");
        return true;
      }
    }
    return false;
  }
  template <class L, class Backend>
  static void call_end(L& listener, Backend& session, std::int64_t step) {
    if constexpr (ListenerHasEnd<L, Backend>) listener.end(session, step);
  }

  // Every listener's after_save, none skipped; true if any asked to stop.
  template <class Backend>
  bool after_save(Backend& session, std::int64_t step) {
    return std::apply(
        [&](auto&... l) {
          bool stop = false;
          ((stop = call_after_save(l, session, step) || stop), ...);  // call first, then or
          return stop;
        },
        listeners_);
  }

  // The rare path of after_run: collect a finished background save, then TensorFlow's trigger.
  // Cold: with save_steps it runs once per save, and so marked GCC keeps the per-step path to the
  // load and the compare (without it, GCC 12 adds a register clear there).
  template <class Backend>
  [[gnu::noinline, gnu::cold]] bool on_trigger(Backend& session, std::int64_t step) {
    bool stop = finish_in_flight(session, /*wait=*/false);
    if (timer_.should_trigger_for_step(step)) {
      if (in_flight_ && skip_when_busy_) {
        log(Severity::warning, "runhooks: CheckpointSaverHook skipped the checkpoint of step " +
                                   std::to_string(step) + ": the save of step " +
                                   std::to_string(in_flight_->step) + " is still being written.");
        timer_.update_last_triggered_step(step);
      } else {
        stop = finish_in_flight(session, /*wait=*/true) || stop;
        timer_.update_last_triggered_step(step);
        stop = save(session, step) || stop;
      }
    }
    rearm(step);
    return stop;
  }

  // Sets the step at which after_run next looks, after `step`: the next save step with
  // save_steps; with save_secs, the step at which the clock is sampled next (about 64 times per
  // period, detail::ClockSampler, so that a save is at most about 1/64 of a period late); at
  // once when a background save has finished.
  void rearm(std::int64_t step) {
    std::int64_t next = always;
    if (save_steps_ > 0) {
      if (timer_.last_triggered_step())
        next = detail::saturating_add(*timer_.last_triggered_step(), save_steps_);
    } else {
      next = detail::saturating_add(
          step, sampler_.stride(step, static_cast<double>(timer_.clock().now()),
                                *timer_.every_secs()));
    }
    next_check_ = next;
    std::lock_guard lock(mutex_);
    if (in_flight_ && in_flight_->done) next = always;
    async_next_check_.store(next, std::memory_order_relaxed);
  }

  template <class Backend>
  bool save(Backend& session, std::int64_t step) {
    if constexpr (Snapshottable<Backend>) {
      if (async_) {
        std::apply([&](auto&... l) { (call_before_save(l, session, step), ...); }, listeners_);
        // No save is in flight here (after_create_session, end() and on_trigger collect it
        // first, or skip), so the kept snapshot is nobody else's.
        if constexpr (SnapshottableInPlace<Backend>)
          start_async(KeptSnapshotWrite<snapshot_t<Backend>>{take_snapshot(session)}, step,
                      wall_now());
        else
          start_async(session.snapshot(), step, wall_now());
        last_saved_step_ = step;
        return false;  // after_save once the write is done
      }
    }
    return save_now(session, step);
  }

  // The write of the kept snapshot: the hook owns it, the thread only writes it.
  template <class Snapshot>
  struct KeptSnapshotWrite {
    Snapshot* snapshot;
    void write(const std::filesystem::path& prefix) const { snapshot->write(prefix); }
  };

  // Fills the snapshot the hook keeps, made on the first call (or when the backend's snapshot
  // type changed, which one MonitoredSession never does): new memory is mapped once, at the
  // session's creation save, and every later save copies into it.
  template <class Backend>
  snapshot_t<Backend>* take_snapshot(Backend& session) {
    using Snapshot = snapshot_t<Backend>;
    if (kept_snapshot_type_ == &kept_snapshot_tag<Snapshot>) {
      auto* kept = static_cast<Snapshot*>(kept_snapshot_.get());
      session.snapshot(*kept);
      return kept;
    }
    std::unique_ptr<Snapshot> made;
    if constexpr (std::default_initializable<Snapshot>) {
      made = std::make_unique<Snapshot>();
      session.snapshot(*made);
    } else {
      made = std::make_unique<Snapshot>(session.snapshot());
    }
    kept_snapshot_ = KeptSnapshot(made.release(), [](void* p) { delete static_cast<Snapshot*>(p); });
    kept_snapshot_type_ = &kept_snapshot_tag<Snapshot>;
    return static_cast<Snapshot*>(kept_snapshot_.get());
  }

  template <class Backend>
  bool save_now(Backend& session, std::int64_t step) {
    std::apply([&](auto&... l) { (call_before_save(l, session, step), ...); }, listeners_);
    // The step waits for the commit, not for the blocks of the checkpoint retention drops.
    const std::filesystem::path prefix =
        manager_.save(step, wall_now(), [&](const std::filesystem::path& p) { session.save(p); },
                      DeleteDropped::in_background);
    log(Severity::info, "runhooks: saved checkpoint " + prefix.string());
    note_checkpoint(step);
    last_saved_step_ = step;
    return after_save(session, step);
  }

  template <class Snapshot>
  void start_async(Snapshot snapshot, std::int64_t step, double timestamp) {
    auto in_flight = std::make_unique<InFlight>();
    in_flight->step = step;
    InFlight* record = in_flight.get();
    // Registered before the thread starts, so that a restore on this thread (a recovery) waits
    // for this save (see detail::SavesInFlight).
    detail::SavesInFlight::instance().add(directory_key_);
    try {
      in_flight->thread = std::thread(
          [this, record, step, timestamp, snapshot = std::move(snapshot)]() mutable {
            std::exception_ptr error;
            try {
              // Released here, before the save is marked done: the step that collects it does
              // not pay for freeing it.
              Snapshot local = std::move(snapshot);
              const std::filesystem::path prefix = manager_.save(
                  step, timestamp, [&](const std::filesystem::path& p) { local.write(p); });
              log(Severity::info, "runhooks: saved checkpoint " + prefix.string());
              note_checkpoint(step);
            } catch (...) {
              error = std::current_exception();
            }
            detail::SavesInFlight::instance().remove(directory_key_);
            std::lock_guard lock(mutex_);
            record->error = error;
            record->done = true;
            async_next_check_.store(always, std::memory_order_relaxed);  // the next after_run collects it
          });
    } catch (...) {
      detail::SavesInFlight::instance().remove(directory_key_);
      throw;
    }
    in_flight_ = std::move(in_flight);
  }

  // Collects a background save: joins it (waiting if `wait`, else only if it is done), raises its
  // error, or calls every listener's after_save. True if a listener asked to stop.
  template <class Backend>
  bool finish_in_flight(Backend& session, bool wait) {
    if (!in_flight_) return false;
    if (!wait) {
      std::lock_guard lock(mutex_);
      if (!in_flight_->done) return false;
    }
    in_flight_->thread.join();
    const std::unique_ptr<InFlight> done = std::move(in_flight_);
    if (done->error) std::rethrow_exception(done->error);
    return after_save(session, done->step);
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

  void join_in_flight() noexcept {
    if (in_flight_ && in_flight_->thread.joinable()) in_flight_->thread.join();
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
  std::shared_ptr<EventFileWriter> events_;  // checkpoint_dir's event file, from begin()
  std::string checkpoint_path_;              // TensorFlow's save path: <checkpoint_dir>/<basename>
  // The options as given, for options(): the caller's string_views may not outlive the hook, so
  // they view these two strings instead (again after a move, which may relocate them).
  std::string checkpoint_dir_;
  std::string basename_;
  CheckpointSaverOptions options_;
};

}  // namespace runhooks
