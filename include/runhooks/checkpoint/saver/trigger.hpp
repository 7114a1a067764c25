// When CheckpointSaverHook saves: the step at which after_run next looks, and TensorFlow's trigger
// on the rare path, once that step is reached.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include <runhooks/detail/periodic_trigger.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/log.hpp>

namespace runhooks::detail {

// The trigger. A base of CheckpointSaverHook (Hook), whose members it reads through self(); it
// holds nothing itself.
template <class Hook>
class SaverTrigger {
 protected:
  Hook& self() noexcept { return static_cast<Hook&>(*this); }
  const Hook& self() const noexcept { return static_cast<const Hook&>(*this); }

  // The rare path of after_run: collect a finished background save, then TensorFlow's trigger,
  // and a scored save that a BestCheckpointHook requested for this step (request_scored_save):
  // one save when both fall on a step, carrying the score. A scored save never moves the
  // periodic trigger and is never skipped for a save in flight (it waits for it).
  // Cold: with save_steps it runs once per save, and so marked GCC keeps the per-step path to the
  // load and the compare (without it, GCC 12 adds a register clear there).
  template <class Backend>
  [[gnu::noinline, gnu::cold]] bool on_trigger(Backend& session, std::int64_t step) {
    bool stop = self().finish_in_flight(session, /*wait=*/false);
    std::optional<double> score;
    if (self().scored_request_ && self().scored_request_->first == step)
      score = self().scored_request_->second;
    self().scored_request_.reset();
    const bool periodic = self().timer_.should_trigger_for_step(step);
    if (periodic && !score && self().in_flight_ && self().skip_when_busy_) {
      log(Severity::warning, "runhooks: CheckpointSaverHook skipped the checkpoint of step " +
                                 std::to_string(step) + ": the save of step " +
                                 std::to_string(self().in_flight_->step) +
                                 " is still being written.");
      self().timer_.update_last_triggered_step(step);
    } else if (periodic || score) {
      stop = self().finish_in_flight(session, /*wait=*/true) || stop;
      if (periodic) self().timer_.update_last_triggered_step(step);
      stop = self().save(session, step, score) || stop;
    }
    rearm(step);
    return stop;
  }

  // Sets the step at which after_run next looks, after `step`: the next save step with
  // save_steps; with save_secs, the step at which the clock is sampled next (about 64 times per
  // period, detail::ClockSampler, so that a save is at most about 1/64 of a period late); at
  // once when a background save has finished.
  void rearm(std::int64_t step) {
    std::int64_t next = Hook::always;
    if (self().save_steps_ > 0) {
      if (self().timer_.last_triggered_step())
        next = detail::saturating_add(*self().timer_.last_triggered_step(), self().save_steps_);
    } else {
      next = detail::saturating_add(
          step, self().sampler_.stride(step, static_cast<double>(self().timer_.clock().now()),
                                *self().timer_.every_secs()));
    }
    self().next_check_ = next;
    std::lock_guard lock(self().mutex_);
    if (self().in_flight_ && self().in_flight_->done) next = Hook::always;
    self().async_next_check_.store(next, std::memory_order_relaxed);
  }
};

}  // namespace runhooks::detail
