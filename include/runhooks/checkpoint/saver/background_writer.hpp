// CheckpointSaverHook's background saves: the snapshot it keeps between saves, the thread that
// writes and commits one, and collecting it (its error, or the listeners' after_save).
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/manager/options.hpp>
#include <runhooks/checkpoint/detail/saves_in_flight.hpp>
#include <runhooks/log.hpp>

namespace runhooks::detail {

// One background save: its thread, its step, and its outcome.
struct SaverInFlight {
  std::thread thread;
  std::int64_t step = 0;
  bool done = false;            // under the hook's mutex_
  std::exception_ptr error;     // under the hook's mutex_ until done
};

// The write of the kept snapshot: the hook owns it, the thread only writes it.
template <class Snapshot>
struct KeptSnapshotWrite {
  Snapshot* snapshot;
  void write(const std::filesystem::path& prefix) const { snapshot->write(prefix); }
};

// The background writer. A base of CheckpointSaverHook (Hook), whose members it reads through
// self(); it holds nothing itself. At most one save is in flight (the hook's in_flight_).
template <class Hook>
class SaverBackgroundWriter {
 protected:
  Hook& self() noexcept { return static_cast<Hook&>(*this); }
  const Hook& self() const noexcept { return static_cast<const Hook&>(*this); }

  // Fills the snapshot the hook keeps, made on the first call (or when the backend's snapshot
  // type changed, which one MonitoredSession never does): new memory is mapped once, at the
  // session's creation save, and every later save copies into it.
  template <class Backend>
  snapshot_t<Backend>* take_snapshot(Backend& session) {
    using Snapshot = snapshot_t<Backend>;
    if (self().kept_snapshot_type_ == &Hook::template kept_snapshot_tag<Snapshot>) {
      auto* kept = static_cast<Snapshot*>(self().kept_snapshot_.get());
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
    self().kept_snapshot_ = typename Hook::KeptSnapshot(
        made.release(), [](void* p) { delete static_cast<Snapshot*>(p); });
    self().kept_snapshot_type_ = &Hook::template kept_snapshot_tag<Snapshot>;
    return static_cast<Snapshot*>(self().kept_snapshot_.get());
  }

  // hook_states: the text of <checkpoint>.hooks, read on the session's thread (empty: none);
  // score: the monitored metric's value for a ranked save (CheckpointManager::save).
  template <class Snapshot>
  void start_async(Snapshot snapshot, std::int64_t step, double timestamp,
                   std::string hook_states = {}, std::optional<double> score = std::nullopt) {
    auto in_flight = std::make_unique<SaverInFlight>();
    in_flight->step = step;
    SaverInFlight* record = in_flight.get();
    // Registered before the thread starts, so that a restore on this thread (a recovery) waits
    // for this save (see detail::SavesInFlight).
    detail::SavesInFlight::instance().add(self().directory_key_);
    try {
      in_flight->thread = std::thread(
          [this, record, step, timestamp, score, snapshot = std::move(snapshot),
           hook_states = std::move(hook_states)]() mutable {
            std::exception_ptr error;
            try {
              // Released here, before the save is marked done: the step that collects it does
              // not pay for freeing it.
              Snapshot local = std::move(snapshot);
              const std::filesystem::path prefix = self().manager_.save(
                  step, timestamp,
                  [&](const std::filesystem::path& p) {
                    local.write(p);
                    Hook::write_hook_states(p, hook_states);
                  },
                  DeleteDropped::now, score);
              log(Severity::info, "runhooks: saved checkpoint " + prefix.string());
              self().note_checkpoint(step);
            } catch (...) {
              error = std::current_exception();
            }
            detail::SavesInFlight::instance().remove(self().directory_key_);
            std::lock_guard lock(self().mutex_);
            record->error = error;
            record->done = true;
            // The next after_run collects it.
            self().async_next_check_.store(Hook::always, std::memory_order_relaxed);
          });
    } catch (...) {
      detail::SavesInFlight::instance().remove(self().directory_key_);
      throw;
    }
    self().in_flight_ = std::move(in_flight);
  }

  // Collects a background save: joins it (waiting if `wait`, else only if it is done), raises its
  // error, or calls every listener's after_save. True if a listener asked to stop.
  template <class Backend>
  bool finish_in_flight(Backend& session, bool wait) {
    if (!self().in_flight_) return false;
    if (!wait) {
      std::lock_guard lock(self().mutex_);
      if (!self().in_flight_->done) return false;
    }
    // Joined already when rank_by (BestCheckpointHook) waited for it.
    if (self().in_flight_->thread.joinable()) self().in_flight_->thread.join();
    const std::unique_ptr<SaverInFlight> done = std::move(self().in_flight_);
    if (done->error) std::rethrow_exception(done->error);
    return self().after_save(session, done->step);
  }

  void join_in_flight() noexcept {
    if (self().in_flight_ && self().in_flight_->thread.joinable()) self().in_flight_->thread.join();
  }
};

}  // namespace runhooks::detail
