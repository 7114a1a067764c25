// StopVoteHook: one stop decision for every rank of a job, on any Collective engine. A stop
// wanted on any rank (a hook, a signal, the coordinator, cast_stop_vote()) stops every rank after
// the same step, with every rank issuing the same sequence of collectives, so none is left
// waiting in one.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>

#include <runhooks/coordinator.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/forwarding_hook.hpp>
#include <runhooks/distributed/collective.hpp>
#include <runhooks/distributed/stop_ballot.hpp>
#include <runhooks/hook_state.hpp>

namespace runhooks {

struct StopVoteOptions {
  // When the ranks vote: after every every_n_steps-th step, or, with 0, about every every_n_secs
  // seconds (the number of steps between votes follows the slowest rank's measured step time,
  // which each vote carries, so every rank computes the same schedule). A stop is agreed at most
  // one vote interval after it was asked for (two when pipelined).
  std::int64_t every_n_steps = 0;
  double every_n_secs = 0.01;
  // false: each vote is one blocking allreduce. true: one nonblocking allreduce in flight,
  // started at a vote step and completed at the next, whose steps the stop then waits for.
  bool pipelined = false;
  // By time (every_n_steps = 0), the votes' own time is kept to at most this fraction of the time
  // spent stepping: the interval is at least the slowest rank's last vote time / max_overhead (a
  // vote that takes 0.3 ms, as a Gloo allreduce on a busy machine, spaces votes 30 ms apart at the
  // default 1 %; an MPI vote of 1 µs leaves every_n_secs in charge). Greater than 0, at most 1.
  double max_overhead = 0.01;

  // std::invalid_argument naming the option and its value for a negative every_n_steps, or an
  // every_n_secs that is not a duration greater than 0 or a max_overhead outside (0, 1] (when
  // used). `type` names the options in the message (MpiStopVoteOptions says its own name).
  const StopVoteOptions& validate(std::string_view type = "StopVoteOptions") const {
    if (every_n_steps < 0)
      throw std::invalid_argument("runhooks: " + std::string(type) +
                                  "::every_n_steps must be at least 0 (0: by time), got " +
                                  std::to_string(every_n_steps) + ".");
    if (every_n_steps == 0) {
      detail::checked_secs((std::string(type) + "::every_n_secs").c_str(), every_n_secs, 0.0,
                           /*min_exclusive=*/true);
      if (!(max_overhead > 0.0 && max_overhead <= 1.0))
        throw std::invalid_argument("runhooks: " + std::string(type) +
                                    "::max_overhead must be greater than 0 and at most 1, got " +
                                    detail::format_number(max_overhead) + ".");
    }
    return *this;
  }
};

// The vote. Put it last in the session on every rank, with the same options. At a vote step its
// after_run() reads what this rank wants (a stop requested by any hook earlier in this step, a
// vote cast with cast_stop_vote() or by a hook wrapped in Voted, a stopped coordinator), takes
// the logical OR over all ranks with one allreduce of three integers (nonblocking when pipelined),
// and requests the stop on every rank when any rank wants it. On other steps after_run() costs an
// increment, a load and two compares: no clock, no communication.
//
// What stops every rank after the same step: a vote cast with any rhythm (cast_stop_vote(), a
// hook wrapped in Voted such as Voted(SignalStopHook())); a stop that a hook requests directly on
// its run context, either with a vote after every step (every_n_steps = 1, not pipelined) or when
// every rank requests it at the same step (StopAtStepHook on a data-parallel local step). Any
// other way out of the loop is final for that rank alone (a direct request on one rank between
// votes, the caller's request_stop(), a coordinator the session polls, the input running out):
// the rank takes part at once in the next round, voting to stop, and leaves; the others stop at
// that round's vote step, so no rank waits for it in a vote. Asynchronous workers need nothing
// more. Ranks in lockstep (a gradient allreduce in every step) would wait for the leaver in that
// allreduce: there, wrap rank-local stop rules (a NaN check, early stopping, signals) in Voted.
//
// A rank that leaves the session by an exception (no end()) must end the job, since the others
// may be waiting for it in a vote: the destructor calls the collective's abandon(), which ends the
// job once the exception has been reported. Construction may be collective (MpiCollective
// duplicates its communicator), and begin() checks, with one allreduce, that every rank votes on
// the same steps (the engine's error_type on every rank otherwise).
template <Collective C>
class StopVoteHook {
 public:
  explicit StopVoteHook(C collective, StopVoteOptions options = {})
      : StopVoteHook(std::move(collective), options.validate(), "StopVoteHook") {}

  StopVoteHook(StopVoteHook&& other) noexcept
      : name_(other.name_), options_(std::move(other.options_)),
        collective_(std::move(other.collective_)) {}
  StopVoteHook& operator=(StopVoteHook&&) = delete;

  ~StopVoteHook() {
    if (armed_ && !finished_) collective_.abandon(name_);
  }

  void begin() {
    // Every rank must vote on the same steps: the maximum of each option and of its negation
    // (its minimum) must agree. every_n_secs and max_overhead, when used, as their bits: the bits
    // of a positive double are a positive int64.
    const bool by_time = options_.every_n_steps == 0;
    const std::int64_t rhythm[4] = {
        options_.every_n_steps, by_time ? std::bit_cast<std::int64_t>(options_.every_n_secs) : 0,
        options_.pipelined ? 1 : 0,
        by_time ? std::bit_cast<std::int64_t>(options_.max_overhead) : 0};
    std::int64_t both[8];
    for (int i = 0; i < 4; ++i) {
      both[2 * i] = rhythm[i];
      both[2 * i + 1] = -rhythm[i];
    }
    collective_.allreduce_max(both);
    for (int i = 0; i < 4; ++i)
      if (both[2 * i] != -both[2 * i + 1])
        throw typename C::error_type(
            "runhooks: " + std::string(collective_.describe()) + ": " + std::string(name_) +
            "'s options (every_n_steps, every_n_secs, pipelined, max_overhead) differ between "
            "ranks; every rank must vote on the same steps.");
    detail::stop_ballot.store(false, std::memory_order_relaxed);
    steps_ = rounds_ = vote_ns_ = 0;
    interval_ = options_.every_n_steps > 0 ? options_.every_n_steps : 1;
    next_vote_ = interval_;
    agreed_ = finished_ = false;
    armed_ = true;
  }

  template <class Backend>
  void after_create_session(Backend&, const Coordinator& coord) {
    coord_stop_ = coord.stop_token();
    last_vote_exit_ = vote_entry_ = std::chrono::steady_clock::now();
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    ++steps_;
    const bool direct = run_context.stop_requested();
    if (steps_ < next_vote_ && !direct) [[likely]]
      return;
    if (vote(direct)) run_context.request_stop();
  }

  // A rank that leaves without an agreed stop (its session was stopped by the coordinator or by
  // the caller, or the input ran out) takes part in the next round, voting to stop, so that the
  // others stop too and none waits for it.
  template <class Backend>
  void end(Backend&) {
    if (armed_ && !finished_) {
      if (options_.every_n_steps == 0) vote_entry_ = std::chrono::steady_clock::now();
      if (in_flight_ && complete_pending().stop) {
        agreed_ = true;
      } else {
        blocking_round(true);
      }
      finished_ = true;
    }
    armed_ = false;
  }

  // Casts this rank's vote to stop (as cast_stop_vote() does).
  void request_stop() noexcept { cast_stop_vote(); }

  // Rounds this rank took part in (the same on every rank when the job ends), steps it ran, and
  // whether the ranks agreed to stop (false for a rank that left on its own).
  std::int64_t rounds() const noexcept { return rounds_; }
  std::int64_t steps() const noexcept { return steps_; }
  bool agreed() const noexcept { return agreed_; }
  // Steps between this rank's votes now (follows the step time in by-time mode).
  std::int64_t interval() const noexcept { return interval_; }
  const StopVoteOptions& options() const noexcept { return options_; }
  C& collective() noexcept { return collective_; }

 protected:
  // For an engine's named form (MpiStopVoteHook): `name` is the hook's name in messages. The
  // options must already be valid.
  StopVoteHook(C collective, const StopVoteOptions& options, std::string_view name)
      : name_(name), options_(options), collective_(std::move(collective)) {}

 private:
  struct Outcome {
    bool stop;
    std::int64_t slowest_ns;       // the slowest rank's time for the steps of the round
    std::int64_t slowest_vote_ns;  // the slowest rank's time in its previous vote
  };

  bool wants_stop(bool direct) const noexcept {
    return direct || detail::stop_ballot.load(std::memory_order_relaxed) ||
           coord_stop_.stop_requested();
  }

  [[gnu::noinline]] bool vote(bool direct) {
    if (options_.every_n_steps == 0) vote_entry_ = std::chrono::steady_clock::now();
    const bool stop = vote_now(direct);
    if (options_.every_n_steps == 0) {
      last_vote_exit_ = std::chrono::steady_clock::now();
      vote_ns_ =
          std::chrono::duration_cast<std::chrono::nanoseconds>(last_vote_exit_ - vote_entry_)
              .count();
    }
    return stop;
  }

  bool vote_now(bool direct) {
    const bool local = wants_stop(direct);
    if (!options_.pipelined) {
      const Outcome outcome = blocking_round(local);
      finished_ = outcome.stop;
      agreed_ = outcome.stop;
      return outcome.stop;
    }
    if (in_flight_) {
      if (complete_pending().stop) {
        finished_ = agreed_ = true;
        return true;
      }
    }
    if (direct) {  // final for this rank: take part in the next round now and leave
      blocking_round(true);
      finished_ = agreed_ = true;
      return true;
    }
    start_round(local);
    return false;
  }

  // The round's payload: the stop wish, and in by-time mode the time this rank spent stepping
  // between its last two votes (their communication time left out: counting a slow round's
  // wait would shrink the interval, making rounds more frequent and slower still) and the time
  // its previous vote took (for max_overhead).
  void fill(bool stop) {
    std::int64_t elapsed = 0;
    if (options_.every_n_steps == 0)
      elapsed =
          std::chrono::duration_cast<std::chrono::nanoseconds>(vote_entry_ - last_vote_exit_)
              .count();
    ballot_[0] = stop ? 1 : 0;
    ballot_[1] = elapsed;
    ballot_[2] = vote_ns_;
    round_interval_ = interval_;
  }

  // A round completed at once. Pipelined, it is a nonblocking allreduce too: a blocking
  // collective never matches a nonblocking one (MPI-3.1 §5.12), and another rank's matching
  // round may be its ordinary nonblocking one.
  Outcome blocking_round(bool stop) {
    if (options_.pipelined) {
      start_round(stop);
      return complete_pending();
    }
    fill(stop);
    collective_.allreduce_max(ballot_);
    return finish_round();
  }

  void start_round(bool stop) {
    fill(stop);
    pending_ = collective_.start_allreduce_max(ballot_);
    in_flight_ = true;
    schedule(round_interval_);  // the next vote step, where this round completes
  }

  Outcome complete_pending() {
    in_flight_ = false;
    pending_.wait();
    return finish_round();
  }

  Outcome finish_round() {
    ++rounds_;
    const Outcome outcome{ballot_[0] != 0, ballot_[1], ballot_[2]};
    if (options_.every_n_steps == 0) {
      // Arithmetic on the same reduced values and options: every rank computes the same interval.
      // The stepping time between votes: every_n_secs, or more when the votes are slow.
      const std::int64_t per_step = std::max<std::int64_t>(1, outcome.slowest_ns / round_interval_);
      const double between_ns =
          std::min(1e18, std::max(options_.every_n_secs * 1e9,
                                  static_cast<double>(outcome.slowest_vote_ns) /
                                      options_.max_overhead));
      const std::int64_t target = static_cast<std::int64_t>(between_ns) / per_step;
      interval_ = std::clamp<std::int64_t>(target, 1, std::min(round_interval_ * 8, max_interval));
    }
    if (!options_.pipelined) schedule(interval_);
    return outcome;
  }

  void schedule(std::int64_t interval) { next_vote_ = detail::saturating_add(steps_, interval); }

  static constexpr std::int64_t max_interval = std::int64_t{1} << 24;

  std::string_view name_;
  StopVoteOptions options_;
  C collective_;
  std::stop_token coord_stop_;
  std::int64_t steps_ = 0;
  std::int64_t next_vote_ = 1;
  std::int64_t interval_ = 1;
  std::int64_t round_interval_ = 1;
  std::int64_t rounds_ = 0;
  std::chrono::steady_clock::time_point vote_entry_{};  // by-time mode only
  std::chrono::steady_clock::time_point last_vote_exit_{};
  typename C::request_type pending_{};
  std::int64_t vote_ns_ = 0;  // this rank's last vote, by-time mode only
  std::int64_t ballot_[3] = {0, 0, 0};  // this rank's wish, then (after the round) every rank's
  bool in_flight_ = false;
  bool armed_ = false;
  bool finished_ = false;
  bool agreed_ = false;
};

// What a hook wrapped in Voted sees as its run context: the session's, except that
// request_stop() casts this rank's vote (cast_stop_vote()) instead of stopping this rank at once.
template <class Ctx>
class VotedRunContext {
 public:
  explicit VotedRunContext(Ctx& context) noexcept : context_(&context) {}
  decltype(auto) original_args() const noexcept { return context_->original_args(); }
  auto& session() const noexcept { return context_->session(); }
  void request_stop() noexcept { cast_stop_vote(); }
  bool stop_requested() const noexcept {
    return context_->stop_requested() || detail::stop_ballot.load(std::memory_order_relaxed);
  }
  std::int64_t global_step()
    requires requires(Ctx& c) { c.global_step(); }
  {
    return context_->global_step();
  }

 private:
  Ctx* context_;
};

// A hook whose stop requests go to the vote: it sees every hook point as it would unwrapped, but
// its run_context.request_stop() casts this rank's vote, so that all ranks stop together after
// the next vote rather than this rank alone now. For stop rules that one rank may trigger on its
// own (a NaN loss, early stopping on local data, a signal, a spike) under a vote that is not after
// every step. Costs nothing beyond the wrapped hook's own calls. Needs no engine: the vote is the
// process's one StopVoteHook (or MpiStopVoteHook).
// When made, it calls the wrapped hook's voted(), if it has one: the hook then sends the stops it
// would ask for outside a run context to the vote too (TimeLimitHook's budget spent at creation),
// or refuses an action that one rank cannot take alone (SpikeHook's rollback). A hook with state
// (StatefulHook) keeps it: the checkpoint carries it under the hook's own name.
template <class Hook>
class Voted : public detail::forwarding_hook<Voted<Hook>, detail::unwrap_hook_t<Hook>> {
  using inner_type = detail::unwrap_hook_t<Hook>;

 public:
  explicit Voted(Hook hook) : hook_(std::move(hook)) {
    if constexpr (requires(inner_type& h) { h.voted(); }) inner().voted();
  }

  // StatefulHook, as the wrapped hook is one (hook_state.hpp).
  static std::string state_name()
    requires StatefulHook<inner_type>
  {
    return inner_type::state_name();
  }
  auto state() const
    requires StatefulHook<inner_type>
  {
    return detail::unwrap(const_cast<Hook&>(hook_)).state();
  }
  template <class State>
    requires StatefulHook<inner_type> && requires(inner_type& h, const State& s) { h.restore(s); }
  void restore(const State& state) {
    inner().restore(state);
  }

  detail::unwrap_hook_t<Hook>& inner() noexcept { return detail::unwrap(hook_); }
  static constexpr bool forwarding() noexcept { return true; }
  template <class Ctx>
  VotedRunContext<Ctx> context(Ctx& run_context) const noexcept {
    return VotedRunContext<Ctx>(run_context);
  }

 private:
  Hook hook_;
};

}  // namespace runhooks
