// A reference model of MonitoredSession's protocol, written from the contract (section 1 of
// tf-semantics.md, docs/coming-from-tensorflow.md (its table of differences) and the public header comments), not from
// the session's code. It consumes the same operations as tests/property/protocol_property.cpp
// feeds the real session, and writes the trace the contract expects: every hook call, every
// backend creation, step and destruction, every coordinator thread's report and join, every log
// line of the session, and the outcome of each operation.
//
// Each rule below names where the contract states it. "TF 1.x" is a section of tf-semantics.md,
// "README" its table of differences, "header" a comment in include/runhooks/.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace protocol {

// ---- The operation language, shared by the model and the driver of the real session --------

// What a scripted call throws, or what a coordinator thread reports (`clean`: a stop without an
// error).
enum class ErrKind { none, aborted, unavailable, out_of_range, fatal, clean };

// Where a fault can be scripted: the five hook points, the session creator and the backend, and
// the body of a run_step_fn step.
enum class Point { begin, after_create_session, before_run, after_run, end, create, initialize, backend_run, step_fn };

inline bool is_hook_point(Point p) {
  return p == Point::begin || p == Point::after_create_session || p == Point::before_run ||
         p == Point::after_run || p == Point::end;
}

// What happens at the nth call of a point within one operation: first the coordinator thread of
// the current backend reports `report` (if that thread still runs), then the hook requests a
// stop (before_run and after_run only), then the call throws `raise`.
struct Action {
  ErrKind report = ErrKind::none;
  bool report_via_throw = false;  // the thread throws (Coordinator::start reports it)
  bool request_stop = false;
  ErrKind raise = ErrKind::none;
};

struct Fault {
  Point point = Point::before_run;
  int hook = 0;  // hook points only; -1 for the others
  int nth = 1;   // the nth call of this point (of this hook) within the operation
  Action action;
};

enum class OpKind {
  run,            // session.run()
  run_step_fn,    // session.run_step_fn(step_fn)
  should_stop,    // session.should_stop()
  request_stop,   // session.request_stop(), the caller's
  close,          // session.close()
  thread_report,  // the current coordinator thread reports `report`
  coord_stop,     // session.coordinator().request_stop(error of `report`), from the caller
  raw_session,    // session.raw_session(): which backend
  run_loop,       // runhooks::run_loop(session, body)
};

// How the body of run_loop ends, at its loop_ending_at-th call (earlier calls run a step).
enum class LoopEnd { out_of_range, stop_iteration, fatal, request_stop };

struct Op {
  OpKind kind = OpKind::run;
  std::vector<Fault> faults;
  int step_runs = 1;   // run_step_fn: the step_fn's run_with_hooks() calls
  int stop_at = -1;    // run_step_fn: step_context.request_stop() before run_with_hooks call
                       // stop_at, or after all of them (== step_runs); -1: never
  ErrKind report = ErrKind::aborted;  // thread_report, coord_stop
  bool via_throw = false;             // thread_report
  int loop_ending_at = 1;             // run_loop
  LoopEnd loop_end = LoopEnd::out_of_range;
};

enum class SessionKind { monitored, singular };

struct Case {
  SessionKind kind = SessionKind::monitored;
  int hooks = 2;             // 2 or 3 scripted hooks, A, B, C
  bool coordinated = false;  // hook A takes runhooks::Coordinator& and starts a thread on each backend
  int max_retries = 1;       // RetryLimit{.max_retries}, zero back-off; large = forever
  std::vector<Fault> construct_faults;
  std::vector<Op> ops;
  std::vector<Fault> destroy_faults;  // the session's destructor (end())
};

inline constexpr int retry_forever = 1000000;

inline std::string hook_name(int hook) { return std::string(1, static_cast<char>('A' + hook)); }

inline std::string kind_name(ErrKind k) {
  switch (k) {
    case ErrKind::none: return "none";
    case ErrKind::aborted: return "Aborted";
    case ErrKind::unavailable: return "Unavailable";
    case ErrKind::out_of_range: return "OutOfRange";
    case ErrKind::fatal: return "Fatal";
    case ErrKind::clean: return "Clean";
  }
  return "?";
}

inline std::string point_name(Point p, int hook) {
  switch (p) {
    case Point::begin: return hook_name(hook) + ".begin";
    case Point::after_create_session: return hook_name(hook) + ".after_create_session";
    case Point::before_run: return hook_name(hook) + ".before_run";
    case Point::after_run: return hook_name(hook) + ".after_run";
    case Point::end: return hook_name(hook) + ".end";
    case Point::create: return "creator.create_session";
    case Point::initialize: return "creator.initialize";
    case Point::backend_run: return "backend.run";
    case Point::step_fn: return "step_fn";
  }
  return "?";
}

// Every error carries a message naming where it was made, unique within a sequence.
inline std::string fault_label(ErrKind k, Point p, int hook, int nth, int op) {
  return kind_name(k) + "@" + point_name(p, hook) + "#" + std::to_string(nth) + "/op" + std::to_string(op);
}
inline std::string report_label(ErrKind k, Point p, int hook, int nth, int op) {
  return kind_name(k) + "@thread:" + point_name(p, hook) + "#" + std::to_string(nth) + "/op" + std::to_string(op);
}

inline std::string describe(const Action& a) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (a.report != ErrKind::none)
    add("thread reports " + kind_name(a.report) + (a.report_via_throw ? " (by throwing)" : ""));
  if (a.request_stop) add("request_stop");
  if (a.raise != ErrKind::none) add("throws " + kind_name(a.raise));
  return s.empty() ? "nothing" : s;
}

inline std::string describe(const Fault& f) {
  return point_name(f.point, is_hook_point(f.point) ? f.hook : -1) + "#" + std::to_string(f.nth) + ": " +
         describe(f.action);
}

inline std::string describe(const Op& op) {
  switch (op.kind) {
    case OpKind::run: return "run()";
    case OpKind::run_step_fn: {
      std::string s = "run_step_fn(" + std::to_string(op.step_runs) + " run_with_hooks";
      if (op.stop_at >= 0) s += ", step_context.request_stop() before call " + std::to_string(op.stop_at + 1);
      return s + ")";
    }
    case OpKind::should_stop: return "should_stop()";
    case OpKind::request_stop: return "request_stop()";
    case OpKind::close: return "close()";
    case OpKind::thread_report:
      return "coordinator thread reports " + kind_name(op.report) + (op.via_throw ? " (by throwing)" : "");
    case OpKind::coord_stop:
      return "coordinator().request_stop(" + (op.report == ErrKind::clean ? std::string() : kind_name(op.report)) + ")";
    case OpKind::raw_session: return "raw_session()";
    case OpKind::run_loop: {
      const char* how = op.loop_end == LoopEnd::out_of_range     ? "throws OutOfRange"
                        : op.loop_end == LoopEnd::stop_iteration ? "throws StopIteration"
                        : op.loop_end == LoopEnd::fatal          ? "throws Fatal"
                                                                 : "calls request_stop()";
      return "run_loop(body call " + std::to_string(op.loop_ending_at) + " " + how + ", the others run())";
    }
  }
  return "?";
}

inline std::string loop_label(LoopEnd how, int op) {
  const char* kind = how == LoopEnd::out_of_range ? "OutOfRange" : how == LoopEnd::stop_iteration ? "StopIteration" : "Fatal";
  return std::string(kind) + "@loop body/op" + std::to_string(op);
}

inline constexpr const char* step_fn_stop_message = "step_fn has requested the iterations to stop.";

// Finds the faults scripted for the nth call of a point within the current operation.
class Script {
 public:
  void start(int op, const std::vector<Fault>* faults) {
    op_ = op;
    faults_ = faults;
    counts_.clear();
  }
  int op() const { return op_; }
  // Counts one call of (p, hook) and calls f(fault, nth) for each fault scripted for it.
  template <class F>
  void on_call(Point p, int hook, F&& f) {
    const int n = ++counts_[{static_cast<int>(p), hook}];
    if (faults_ == nullptr) return;
    for (const Fault& fault : *faults_)
      if (fault.point == p && (is_hook_point(p) ? fault.hook : -1) == hook && fault.nth == n) f(fault, n);
  }

 private:
  int op_ = 0;
  const std::vector<Fault>* faults_ = nullptr;
  std::map<std::pair<int, int>, int> counts_;
};

// ---- Known deviations of the session from the contract ---------------------------------------
// Each one, when tolerated (RUNHOOKS_PROPERTY_TOLERATE), makes the model predict what the
// session does today instead of what the contract says, so that the search can go on past it.
// tests/property/README.md has each one's minimal sequence.
struct Deviations {
  // D1: when the retry policy gives up, the session raises the error of the step that failed
  // last, as the step raised it, not the failure the policy gave up on (a re-creation's error,
  // or the coordinator's preemption error that TF substitutes).
  bool give_up_raises_step_error = false;
  // D2: an error that step_fn raises itself (not from run_with_hooks), StopIteration included,
  // is taken for the coordinator's preemption error and step_fn re-runs; TF substitutes only
  // errors of a hooked run (_CoordinatedSession.run, TF 1.7).
  bool step_fn_errors_substituted = false;
  // D3: SingularMonitoredSession does not substitute the coordinator's preemption error for a
  // hooked run's non-preemption error (TF 1.5: Singular is _CoordinatedSession(_HookedSession)).
  bool singular_no_substitution = false;
  // D4: the recovery's log line names the step's error as raised (not the preemption error
  // recovered from), or an error of an earlier recovery.
  bool recovery_log_names_other_error = false;
  // D5: a constructor whose re-creation fails with a non-preemption error raises that error and
  // drops a thread's error found while ending the failed generation.
  bool constructor_drops_thread_error = false;
  // D6: run() refuses after a hook's stop request even while the coordinator holds a
  // preemption error; TF's _HookedSession refusal is inside _CoordinatedSession.run, so the
  // preemption error replaces it and the session recovers.
  bool hook_stop_refusal_not_substituted = false;
  // D7: with no backend (the policy gave up), an error leaving step_fn (the UsageError of
  // run_with_hooks, or the step_fn's own) is taken for the ended generation's preemption error,
  // and run_step_fn re-creates the backend, where run() raises UsageError.
  bool no_backend_step_fn_recovers = false;
  // D8: a thread's error that run() raised is kept again when a later recovery ends the same
  // generation (run_step_fn with no backend), and raised a second time.
  bool thread_error_raised_twice = false;
};

// ---- The model -------------------------------------------------------------------------------

class Model {
 public:
  explicit Model(const Case& c, Deviations deviations = {}) : c_(c), dev_(deviations) {}

  std::vector<std::string> run() {
    script_.start(0, &c_.construct_faults);
    trace("== 0 construct");
    try {
      construct();
      trace("=> ok");
    } catch (const Error& e) {
      outcome(e);
      return trace_;  // no session: nothing else runs
    }
    int index = 0;
    for (const Op& op : c_.ops) {
      ++index;
      script_.start(index, &op.faults);
      trace("== " + std::to_string(index) + " " + describe(op));
      try {
        trace("=> " + exec(op));
      } catch (const Error& e) {
        outcome(e);
      }
    }
    script_.start(index + 1, &c_.destroy_faults);
    trace("== " + std::to_string(index + 1) + " destroy");
    destroy();
    trace("=> ok");
    return trace_;
  }

 private:
  struct Error {
    std::string type;  // the C++ class, as the driver names it
    std::string what;
    // When the coordinator's preemption error replaced a hooked run's error: that error.
    std::string original_type, original_what;

    bool preemption() const { return type == "AbortedError" || type == "UnavailableError"; }
    bool same(const std::optional<Error>& other) const { return other && other->what == what; }
    Error as_raised() const { return original_type.empty() ? *this : Error{original_type, original_what, {}, {}}; }
  };

  static Error make(ErrKind k, std::string label) {
    switch (k) {
      case ErrKind::aborted: return {"AbortedError", std::move(label), {}, {}};
      case ErrKind::unavailable: return {"UnavailableError", std::move(label), {}, {}};
      case ErrKind::out_of_range: return {"OutOfRangeError", std::move(label), {}, {}};
      default: return {"runtime_error", std::move(label), {}, {}};
    }
  }
  static Error usage(std::string what) { return {"UsageError", std::move(what), {}, {}}; }

  bool monitored() const { return c_.kind == SessionKind::monitored; }
  void trace(std::string line) { trace_.push_back(std::move(line)); }
  void outcome(const Error& e) { trace("=> threw " + e.type + ": " + e.what); }

  // ---- scripted calls ----

  // One scripted call: its faults in order; `ctx_stop` is the run context's stop request.
  void fire(Point p, int hook, bool* ctx_stop = nullptr) {
    std::optional<Error> thrown;
    script_.on_call(p, hook, [&](const Fault& f, int nth) {
      if (thrown) return;
      const int op = script_.op();
      if (f.action.report != ErrKind::none)
        thread_reports(f.action.report, report_label(f.action.report, p, hook, nth, op));
      if (f.action.request_stop && ctx_stop != nullptr) {
        trace(point_name(p, hook) + " requests stop");
        *ctx_stop = true;
      }
      if (f.action.raise != ErrKind::none) {
        thrown = make(f.action.raise, fault_label(f.action.raise, p, hook, nth, op));
        trace(point_name(p, hook) + " throws " + thrown->what);
      }
    });
    if (thrown) throw *thrown;
  }

  // The coordinator thread of the current backend reports, if it is still running (a thread
  // ends once its coordinator stops: by its own report, the caller's stop, or a join).
  // TF 1.5 Coordinator: the first error reported is kept, later ones are dropped.
  void thread_reports(ErrKind k, const std::string& label) {
    if (live_thread_ == 0) return;
    trace("A.thread#" + std::to_string(live_thread_) + " reports " + label);
    live_thread_ = 0;
    coord_stopped_ = true;
    if (k != ErrKind::clean && !coord_error_) coord_error_ = make(k, label);
  }

  // ---- creation and the end of a backend's generation ----

  // TF 1.9 construction order and 1.1 after_create_session: the creator makes the backend,
  // initialize() restores it (session_creator.hpp: "called on every fresh backend before any
  // hook's after_create_session"; a backend whose initialize() threw is destroyed), the
  // coordinator is fresh for it (README: "resets it in place"), then every hook's
  // after_create_session in order; hook A starts the backend's coordinator thread.
  // A stop the creator or initialize() requests (the caller's request_stop(), made while the
  // session creates its backend: header request_stop()) is held in creator_stop_ until the
  // creation or recovery ends (end_creating()).
  void create_attempt() {
    create_backend();
    start_generation();
  }
  void create_backend() {
    const int k = ++backends_made_;
    const std::string b = "backend#" + std::to_string(k);
    trace(b + ".create");
    fire(Point::create, -1, &creator_stop_);
    trace(b + ".initialize");
    try {
      fire(Point::initialize, -1, &creator_stop_);
    } catch (const Error&) {
      trace(b + ".destroy");
      throw;
    }
    backend_ = k;
  }
  void start_generation() {
    const std::string b = "backend#" + std::to_string(backend_);
    if (coord_exists_) {
      coord_stopped_ = false;
      coord_error_.reset();
    }
    for (int i = 0; i < c_.hooks; ++i) {
      trace(hook_name(i) + ".after_create_session(" + b + ")");
      if (i == 0 && c_.coordinated) live_thread_ = ++threads_started_;
      fire(Point::after_create_session, i);
    }
  }

  // Ending a backend's generation (brief; header end_generation(); TF 1.6 _CoordinatedSession
  // .close): stop the coordinator and join its thread, then destroy the backend. A non-preemption
  // error a thread reported is kept to be raised, never dropped, and never raised twice.
  void end_generation() {
    if (coord_exists_) {
      join_thread();
      coord_stopped_ = true;
      if (coord_error_ && !coord_error_->preemption() && !pending_ &&
          (dev_.thread_error_raised_twice || !coord_error_->same(raised_)))
        pending_ = coord_error_;
    }
    if (backend_ != 0) {
      trace("backend#" + std::to_string(backend_) + ".destroy");
      backend_ = 0;
    }
  }

  void join_thread() {
    if (live_thread_ != 0) {
      trace("A.thread#" + std::to_string(live_thread_) + " stopped");
      live_thread_ = 0;
    }
  }

  // TF 1.7 _RecoverableSession, bounded by the retry policy (README "Recovery retries forever":
  // a policy; session_creator.hpp: asked after the n-th consecutive failure). Ends the lost
  // generation (begin() is not called again), then re-creates while the policy allows; a
  // preemption error while re-creating is one more failure; a successful re-creation clears the
  // hooks' stop requests but not the caller's (brief; TF: a new _HookedSession). Returns false
  // when the policy gives up or a thread's error waits: the session then has no backend (header:
  // recover(), raw_session()). A non-preemption error while re-creating propagates. `cause` is
  // the failure being recovered from; it becomes the one the policy gave up on.
  //
  // README "a stop always wins" (header recover()): a stop requested during the recovery is
  // looked for before each attempt (before the policy is asked) and once the backend is created
  // and initialized, before any hook sees it (it is then destroyed); it ends the recovery
  // without a backend, with one log line: Recovery::stopped.
  enum class Recovery { recovered, gave_up, stopped };
  Recovery recover(int& failures, Error& cause, const std::string& first_log) {
    struct Ending {  // the caller's stop, once the recovery ends, however it ends
      Model* m;
      ~Ending() { m->end_creating(); }
    } ending{this};
    end_generation();
    if (pending_) return Recovery::gave_up;
    for (bool first = true;; ++failures, first = false) {
      if (creator_stop_) return stopped_during_recovery(failures, cause);
      if (failures > c_.max_retries) return Recovery::gave_up;
      trace("log: re-creating (attempt " + std::to_string(failures) + "): " + (first ? first_log : cause.what));
      try {
        create_backend();
        if (creator_stop_) {
          trace("backend#" + std::to_string(backend_) + ".destroy");
          backend_ = 0;
          return stopped_during_recovery(failures, cause);
        }
        start_generation();
        hook_stop_ = false;
        return Recovery::recovered;
      } catch (const Error& e) {
        end_generation();
        if (!e.preemption()) throw;
        if (pending_) return Recovery::gave_up;
        cause = e;
        last_creation_error_ = e.what;  // D4 emulation only
      }
    }
  }

  Recovery stopped_during_recovery(int failures, const Error& cause) {
    trace("log: stopped during recovery (request_stop() was called) after " + std::to_string(failures) +
          ": " + cause.what);
    return Recovery::stopped;
  }

  // Header request_stop(): a request made while the loop's thread creates or re-creates the
  // backend becomes the caller's stop once that ends.
  void end_creating() {
    if (creator_stop_) caller_stop_ = true;
    creator_stop_ = false;
  }

  [[noreturn]] void raise_pending() {
    raised_ = pending_;
    pending_.reset();
    throw *raised_;
  }

  // What the session logs for the first re-creation attempt after a step failed with `e`.
  std::string first_log(const Error& e) const {
    if (!dev_.recovery_log_names_other_error) return e.what;
    if (last_creation_error_) return *last_creation_error_;
    return e.as_raised().what;
  }

  // TF 1.7 _RecoverableSession.run / run_step_fn: on a preemption error re-create, then replay
  // the whole body. When the policy gives up, a waiting thread error wins (brief: raised from
  // the run() that was recovering), else the failure the policy gave up on propagates
  // (session_creator.hpp: "give up and let the error propagate").
  template <class Body>
  void with_recovery(Body&& body) {
    for (int failures = 1;; ++failures) {
      try {
        body();
        return;
      } catch (const Error& e) {
        if (!e.preemption()) throw;
        Error cause = e;
        Recovery recovered = Recovery::gave_up;
        try {
          recovered = recover(failures, cause, first_log(e));
        } catch (const Error&) {
          // A fatal error while re-creating: a waiting thread error still wins (header
          // throw_for(): what a thread reported wins).
          if (pending_) raise_pending();
          throw;
        }
        // Header run() and run_step_fn(): the step is not run again, and (void) returns.
        if (recovered == Recovery::stopped) return;
        if (recovered == Recovery::gave_up) {
          if (pending_) raise_pending();
          throw dev_.give_up_raises_step_error ? e.as_raised() : cause;
        }
      }
    }
  }

  // ---- construction and destruction ----

  void construct() {
    for (int i = 0; i < c_.hooks; ++i) {  // TF 1.1: begin() once per hook, in order, first
      trace(hook_name(i) + ".begin");
      fire(Point::begin, i);
    }
    if (c_.coordinated) coord_exists_ = true;
    if (!monitored()) {
      try {
        create_attempt();
      } catch (const Error&) {
        // The exception leaves the constructor after the generation ended: its coordinator's
        // thread is joined before the backend is destroyed, and a non-preemption error the
        // thread reported wins (header throw_for(); never dropped), in both kinds of session.
        end_generation();
        if (pending_) throw *pending_;
        throw;
      }
      end_creating();  // no recovery: a stop from the creator is the caller's at once
      return;
    }
    // TF 1.7 "Creation": the constructor creates the first session, retrying preemption errors.
    // A thread's error found on the way wins (header throw_for(): what a thread reported wins;
    // brief: never dropped, and no later run() could raise it). A stop during the retries ends
    // them: the constructor returns a stopped session without a backend.
    struct Ending {
      Model* m;
      ~Ending() { m->end_creating(); }
    } ending{this};
    try {
      create_attempt();
    } catch (const Error& e) {
      end_generation();
      if (!e.preemption()) {
        if (pending_) throw *pending_;
        throw;
      }
      int failures = 1;
      Error cause = e;
      Recovery recovered = Recovery::gave_up;
      try {
        recovered = recover(failures, cause, e.what);
      } catch (const Error&) {
        if (pending_ && !dev_.constructor_drops_thread_error) throw *pending_;
        throw;
      }
      if (recovered == Recovery::gave_up) {
        if (pending_) throw *pending_;
        throw dev_.give_up_raises_step_error ? e : cause;
      }
    }
  }

  // README: "the block ends normally, end() runs": the destructor closes with end(); errors
  // are logged (README "s.close()" row: in the destructor they can only be logged). Then the
  // backend goes, after the coordinator's threads were joined.
  void destroy() {
    if (!closed_) {
      try {
        close_internal(true);
      } catch (const Error& e) {
        trace("log: error while closing in its destructor: " + e.what);
      }
    }
    if (backend_ != 0) trace("backend#" + std::to_string(backend_) + ".destroy");
  }

  // ---- the operations ----

  std::string exec(const Op& op) {
    switch (op.kind) {
      case OpKind::run: run_op(); return "ok";
      case OpKind::run_step_fn: run_step_fn(op); return "ok";
      case OpKind::should_stop: return should_stop() ? "true" : "false";
      case OpKind::request_stop: caller_stop_ = true; return "ok";
      case OpKind::close: close(); return "ok";
      case OpKind::thread_report:
        thread_reports(op.report, kind_name(op.report) + "@thread/op" + std::to_string(script_.op()));
        return "ok";
      case OpKind::coord_stop: {
        // session.coordinator(): the session polls it from now on (README).
        coord_exists_ = true;
        join_thread();  // the stop reaches the thread, which ends (the driver waits for it)
        coord_stopped_ = true;
        if (op.report != ErrKind::clean && !coord_error_)
          coord_error_ = make(op.report, kind_name(op.report) + "@caller/op" + std::to_string(script_.op()));
        return "ok";
      }
      case OpKind::raw_session:
        if (backend_ == 0) throw usage("The session has no backend: re-creating it failed, or a stop ended its recovery.");  // header
        return "backend#" + std::to_string(backend_);
      case OpKind::run_loop: run_loop(op); return "ok";
    }
    return "?";
  }

  // The refusals of a hooked run that come before TF's _CoordinatedSession layer: a closed
  // session (TF 1.5: _sess is None), a waiting thread error (brief: raised from the next run()),
  // the caller's stop request (README; it survives recovery), no backend after a failed
  // re-creation (tests/session/recovery.cpp's documented difference: should_stop() is true and
  // run() throws UsageError).
  void refuse_outside() {
    if (pending_) {
      raised_ = pending_;
      pending_.reset();
      throw *raised_;
    }
    if (closed_) throw usage("Run called on a closed session.");
    if (caller_stop_ || backend_ == 0 || (hook_stop_ && dev_.hook_stop_refusal_not_substituted))
      throw usage("Run called even after should_stop requested.");
  }

  // TF 1.4 _HookedSession.run: refused after a hook's stop; every before_run, the step, every
  // after_run, in list order; an exception stops the rest (TF 1.1 "Not called"); the stop
  // requests of the run context count only once the last after_run returned.
  void hooked_session_run() {
    if (hook_stop_) throw usage("Run called even after should_stop requested.");
    bool ctx_stop = false;
    for (int i = 0; i < c_.hooks; ++i) {
      trace(hook_name(i) + ".before_run");
      fire(Point::before_run, i, &ctx_stop);
    }
    trace("backend#" + std::to_string(backend_) + ".run");
    fire(Point::backend_run, -1);
    for (int i = 0; i < c_.hooks; ++i) {
      trace(hook_name(i) + ".after_run");
      fire(Point::after_run, i, &ctx_stop);
    }
    if (ctx_stop) hook_stop_ = true;
  }

  // TF 1.7 _CoordinatedSession.run around it: a non-preemption error while the coordinator
  // holds a preemption error is replaced by that preemption error (both sessions: TF 1.5
  // wrapper stacks).
  void coordinated_run() {
    try {
      hooked_session_run();
    } catch (const Error& e) {
      const bool substitutes = monitored() || !dev_.singular_no_substitution;
      if (substitutes && !e.preemption() && coord_error_ && coord_error_->preemption()) {
        Error replaced = *coord_error_;
        replaced.original_type = e.type;
        replaced.original_what = e.what;
        throw replaced;
      }
      throw;
    }
  }

  void run_op() {
    refuse_outside();
    if (monitored())
      with_recovery([&] { coordinated_run(); });
    else
      coordinated_run();  // TF 1.7: SingularMonitoredSession never recovers
  }

  // TF 1.8: the whole step_fn runs again after a recovery; run_with_hooks is a hooked run without
  // the recovery layer; step_context.request_stop() raises StopIteration. The brief: after close()
  // run_step_fn throws UsageError("Run called on a closed session."); a waiting thread error is
  // raised as by run().
  void run_step_fn(const Op& op) {
    if (pending_) {
      raised_ = pending_;
      pending_.reset();
      throw *raised_;
    }
    if (closed_) throw usage("Run called on a closed session.");
    auto step_stop = [&] {
      trace("step_fn requests stop");
      throw Error{"StopIteration", step_fn_stop_message, {}, {}};
    };
    auto body = [&] {
      trace("step_fn");
      for (int j = 0; j < op.step_runs; ++j) {
        if (op.stop_at == j) step_stop();
        refuse_outside();
        coordinated_run();
      }
      fire(Point::step_fn, -1);
      if (op.stop_at == op.step_runs) step_stop();
    };
    if (!monitored()) {
      body();
      return;
    }
    with_recovery([&] {
      try {
        body();
      } catch (const Error& e) {
        // D2/D7 emulation: the session replaces any error leaving step_fn.
        const bool replaces = backend_ != 0 ? dev_.step_fn_errors_substituted : dev_.no_backend_step_fn_recovers;
        if (replaces && !e.preemption() && coord_error_ && coord_error_->preemption()) {
          Error replaced = *coord_error_;
          replaced.original_type = e.type;
          replaced.original_what = e.what;
          throw replaced;
        }
        throw;
      }
    });
  }

  // TF 1.5. MonitoredSession: true once closed, while an error waits, without a backend, after a
  // hook's, the caller's or the coordinator's stop; a preemption error reported to the
  // coordinator re-creates the backend here (even after a hook's stop: the coordinator is read
  // first) and then only the caller's stop counts; should_stop() never throws (brief): an error
  // while re-creating is logged and means stop. SingularMonitoredSession re-throws the
  // coordinator's error ([derived]).
  bool should_stop() {
    if (closed_) return true;
    if (!monitored()) {
      if (coord_error_) throw *coord_error_;
      return hook_stop_ || caller_stop_ || coord_stopped_;
    }
    if (pending_) return true;
    if (backend_ != 0 && coord_error_ && coord_error_->preemption()) {
      int failures = 1;
      Error cause = *coord_error_;
      last_creation_error_.reset();
      try {
        const Recovery recovered = recover(failures, cause, cause.what);
        last_creation_error_.reset();
        if (recovered != Recovery::recovered) return true;
      } catch (const Error& e) {
        last_creation_error_.reset();
        trace("log: re-creating failed: " + e.what);
        return true;
      }
      return caller_stop_;
    }
    return hook_stop_ || caller_stop_ || coord_stopped_ || backend_ == 0;
  }

  // README: closing twice throws UsageError without calling end() again.
  void close() {
    if (closed_) throw usage("Session is already closed.");
    close_internal(true);
  }

  // TF 1.6 and the header's close(): every end() in order (an end() that throws stops the rest),
  // with the current backend (none after a failed re-creation: no end()); then stop and join the
  // coordinator. Throws the first of: an end() that threw, a waiting thread error, the
  // coordinator's error (not one run() already raised). A MonitoredSession logs a preemption
  // error a thread reported at shutdown instead; a SingularMonitoredSession throws it.
  void close_internal(bool call_end) {
    closed_ = true;
    std::optional<Error> first;
    if (call_end && backend_ != 0) {
      for (int i = 0; i < c_.hooks && !first; ++i) {
        trace(hook_name(i) + ".end(backend#" + std::to_string(backend_) + ")");  // TF 1.1: the newest
        try {
          fire(Point::end, i);
        } catch (const Error& e) {
          first = e;
        }
      }
    }
    std::optional<Error> thread_error;
    if (coord_exists_) {
      join_thread();
      coord_stopped_ = true;
      thread_error = coord_error_;
    }
    if (thread_error && thread_error->preemption() && monitored()) {
      trace("log: close ignores: " + thread_error->what);
      thread_error.reset();
    }
    if (thread_error && thread_error->same(raised_)) thread_error.reset();
    std::optional<Error> error = first ? first : pending_ ? pending_ : thread_error;
    pending_.reset();
    if (error) throw *error;
  }

  // docs/coming-from-tensorflow.md: run_loop is the `with` block. OutOfRangeError and
  // StopIteration end it cleanly and close() calls every end(); any other exception closes
  // without end() (errors logged) and propagates.
  void run_loop(const Op& op) {
    int calls = 0;
    try {
      while (!should_stop()) {
        if (++calls == op.loop_ending_at) {
          if (op.loop_end == LoopEnd::request_stop) {
            trace("loop body requests stop");
            caller_stop_ = true;
            continue;
          }
          const std::string label = loop_label(op.loop_end, script_.op());
          trace("loop body throws " + label);
          if (op.loop_end == LoopEnd::out_of_range) throw Error{"OutOfRangeError", label, {}, {}};
          if (op.loop_end == LoopEnd::stop_iteration) throw Error{"StopIteration", label, {}, {}};
          throw Error{"runtime_error", label, {}, {}};
        }
        run_op();
      }
    } catch (const Error& e) {
      if (e.type != "OutOfRangeError" && e.type != "StopIteration") {
        if (!closed_) {
          try {
            close_internal(false);
          } catch (const Error& e2) {
            trace("log: error while closing after an exception: " + e2.what);
          }
        }
        throw;
      }
    }
    close();
  }

  const Case& c_;
  Deviations dev_;
  Script script_;
  std::vector<std::string> trace_;

  int backends_made_ = 0;
  int backend_ = 0;  // the current backend's number; 0: none
  bool closed_ = false;
  bool hook_stop_ = false;
  bool caller_stop_ = false;
  bool creator_stop_ = false;  // see create_attempt()
  std::optional<Error> pending_;  // a thread's error waiting to be raised
  std::optional<Error> raised_;   // the one run() raised

  bool coord_exists_ = false;
  bool coord_stopped_ = false;
  std::optional<Error> coord_error_;
  int threads_started_ = 0;
  int live_thread_ = 0;  // the running coordinator thread's number; 0: none

  std::optional<std::string> last_creation_error_;  // D4 emulation only
};

}  // namespace protocol
