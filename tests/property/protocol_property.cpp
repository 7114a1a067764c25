// Property test (issue 9): random sequences of steps, stop requests, recoverable and fatal errors
// at every hook point and in the backend, coordinator threads' reports, and close, run against the
// real MonitoredSession / SingularMonitoredSession and against the reference model in
// protocol_model.hpp. Both must write the same trace: every hook call, backend creation, step and
// destruction, thread report and join, log line, and the outcome of each operation. RapidCheck
// generates the sequences and shrinks a failing one to a minimal one, printed as a script.
//
// Sequences: RUNHOOKS_PROPERTY_SEQUENCES (default 10000), or max_success in RC_PARAMS, which wins.
// A failure prints RapidCheck's seed; RC_PARAMS="seed=<seed>" replays it.
// The session's known deviations from the contract are tolerated (known_deviations below);
// RUNHOOKS_PROPERTY_TOLERATE=none checks the contract alone.
#include <rapidcheck.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>

#include "protocol_model.hpp"

namespace protocol {

// ---- Readable printing of a sequence (RapidCheck prints the shrunk counterexample with it) ----

void showValue(const Case& c, std::ostream& os) {
  os << (c.kind == SessionKind::monitored ? "MonitoredSession" : "SingularMonitoredSession")
     << " from a session creator with RetryLimit{.max_retries = "
     << (c.max_retries >= retry_forever ? std::string("forever") : std::to_string(c.max_retries))
     << "}, hooks";
  for (int i = 0; i < c.hooks; ++i)
    os << " " << hook_name(i) << (i == 0 && c.coordinated ? " (takes Coordinator&, starts a thread per backend)" : "");
  os << "\n";
  auto faults = [&](const std::vector<Fault>& fs) {
    for (const Fault& f : fs) os << "        at " << describe(f) << "\n";
  };
  os << "  0 construct\n";
  faults(c.construct_faults);
  int i = 0;
  for (const Op& op : c.ops) {
    os << "  " << ++i << " " << describe(op) << "\n";
    faults(op.faults);
  }
  os << "  " << i + 1 << " destroy\n";
  faults(c.destroy_faults);
}

// ---- Generators ---------------------------------------------------------------------------------

namespace gens {

// A weighted choice that shrinks towards its first entry, the simplest (RapidCheck's
// weightedElement does not shrink).
template <class T>
rc::Gen<T> weighted(std::vector<std::pair<int, T>> choices) {
  int total = 0;
  for (const auto& choice : choices) total += choice.first;
  // At RapidCheck's nominal size, inRange covers the whole range whatever size is asked for.
  return rc::gen::map(rc::gen::resize(rc::kNominalSize, rc::gen::inRange(0, total)), [choices](int r) {
    for (const auto& choice : choices) {
      if (r < choice.first) return choice.second;
      r -= choice.first;
    }
    return choices.back().second;
  });
}

rc::Gen<ErrKind> raise_kind() {
  return weighted<ErrKind>({{20, ErrKind::none},
                            {30, ErrKind::aborted},
                            {12, ErrKind::unavailable},
                            {13, ErrKind::out_of_range},
                            {25, ErrKind::fatal}});
}

rc::Gen<ErrKind> report_kind() {
  return weighted<ErrKind>({{3, ErrKind::aborted},
                            {2, ErrKind::unavailable},
                            {3, ErrKind::fatal},
                            {1, ErrKind::out_of_range},
                            {2, ErrKind::clean}});
}

rc::Gen<Action> action(bool can_request_stop) {
  return rc::gen::build<Action>(
      rc::gen::set(&Action::report, weighted<ErrKind>({{44, ErrKind::none},
                                                       {3, ErrKind::aborted},
                                                       {2, ErrKind::unavailable},
                                                       {3, ErrKind::fatal},
                                                       {1, ErrKind::out_of_range},
                                                       {2, ErrKind::clean}})),
      rc::gen::set(&Action::report_via_throw, weighted<bool>({{3, false}, {1, true}})),
      rc::gen::set(&Action::request_stop,
                   can_request_stop ? weighted<bool>({{3, false}, {1, true}}) : rc::gen::just(false)),
      rc::gen::set(&Action::raise, raise_kind()));
}

rc::Gen<int> nth() { return weighted<int>({{14, 1}, {4, 2}, {2, 3}}); }

using Points = std::vector<std::pair<int, Point>>;

// The points an operation can reach: a step's, and a re-creation's when it recovers.
const Points run_points = {{25, Point::before_run}, {25, Point::after_run}, {25, Point::backend_run},
                           {8, Point::create},      {5, Point::initialize}, {12, Point::after_create_session}};
const Points step_fn_points = {{20, Point::before_run}, {20, Point::after_run}, {20, Point::backend_run},
                               {20, Point::step_fn},    {6, Point::create},     {4, Point::initialize},
                               {10, Point::after_create_session}};
const Points recreate_points = {{30, Point::create}, {20, Point::initialize}, {50, Point::after_create_session}};
const Points construct_points = {{15, Point::begin}, {30, Point::create}, {20, Point::initialize},
                                 {35, Point::after_create_session}};
const Points end_points = {{1, Point::end}};

rc::Gen<Fault> fault(const Points& points) {
  return rc::gen::mapcat(weighted(points), [](Point p) {
    return rc::gen::build<Fault>(
        rc::gen::set(&Fault::point, rc::gen::just(p)),
        rc::gen::set(&Fault::hook, is_hook_point(p) ? weighted<int>({{1, 0}, {1, 1}, {1, 2}}) : rc::gen::just(-1)),
        rc::gen::set(&Fault::nth, nth()),
        // At create and initialize, a stop request is the caller's request_stop() while the
        // session creates or re-creates its backend (a stop during recovery).
        rc::gen::set(&Fault::action, action(p == Point::before_run || p == Point::after_run ||
                                            p == Point::create || p == Point::initialize)));
  });
}

rc::Gen<std::vector<Fault>> faults(const Points& points, int at_most) {
  return rc::gen::resize(at_most, rc::gen::container<std::vector<Fault>>(fault(points)));
}

rc::Gen<Op> op() {
  const std::vector<std::pair<int, OpKind>> kinds = {
      {30, OpKind::run},          {10, OpKind::run_step_fn}, {20, OpKind::should_stop},
      {3, OpKind::request_stop},  {6, OpKind::close},        {8, OpKind::thread_report},
      {4, OpKind::coord_stop},    {4, OpKind::raw_session},  {5, OpKind::run_loop}};
  return rc::gen::mapcat(weighted(kinds), [](OpKind kind) -> rc::Gen<Op> {
    const auto just_kind = rc::gen::set(&Op::kind, rc::gen::just(kind));
    switch (kind) {
      case OpKind::run:
        return rc::gen::build<Op>(just_kind, rc::gen::set(&Op::faults, faults(run_points, 3)));
      case OpKind::run_step_fn:
        return rc::gen::map(
            rc::gen::build<Op>(just_kind, rc::gen::set(&Op::faults, faults(step_fn_points, 3)),
                               rc::gen::set(&Op::step_runs, weighted<int>({{1, 0}, {3, 1}, {2, 2}})),
                               rc::gen::set(&Op::stop_at, weighted<int>({{7, -1}, {1, 0}, {1, 1}, {1, 2}}))),
            [](Op o) {
              if (o.stop_at > o.step_runs) o.stop_at = -1;
              return o;
            });
      case OpKind::should_stop:
        return rc::gen::build<Op>(just_kind, rc::gen::set(&Op::faults, faults(recreate_points, 2)));
      case OpKind::close:
        return rc::gen::build<Op>(just_kind, rc::gen::set(&Op::faults, faults(end_points, 2)));
      case OpKind::thread_report:
        return rc::gen::build<Op>(just_kind, rc::gen::set(&Op::report, report_kind()),
                                  rc::gen::set(&Op::via_throw, weighted<bool>({{3, false}, {1, true}})));
      case OpKind::coord_stop:
        return rc::gen::build<Op>(just_kind, rc::gen::set(&Op::report, report_kind()));
      case OpKind::run_loop:
        return rc::gen::build<Op>(
            just_kind, rc::gen::set(&Op::faults, faults(run_points, 3)),
            rc::gen::set(&Op::loop_ending_at, weighted<int>({{1, 1}, {1, 2}, {1, 3}})),
            rc::gen::set(&Op::loop_end, weighted<LoopEnd>({{3, LoopEnd::out_of_range},
                                                                          {2, LoopEnd::stop_iteration},
                                                                          {2, LoopEnd::fatal},
                                                                          {3, LoopEnd::request_stop}})));
      case OpKind::request_stop:
      case OpKind::raw_session:
        break;
    }
    return rc::gen::build<Op>(just_kind);
  });
}

rc::Gen<Case> sequence() {
  return rc::gen::build<Case>(
      rc::gen::set(&Case::kind, weighted<SessionKind>({{7, SessionKind::monitored}, {3, SessionKind::singular}})),
      rc::gen::set(&Case::hooks, weighted<int>({{1, 2}, {1, 3}})),
      rc::gen::set(&Case::coordinated, weighted<bool>({{2, false}, {3, true}})),
      rc::gen::set(&Case::max_retries, weighted<int>({{2, 0}, {3, 1}, {2, 2}, {1, 3}, {2, retry_forever}})),
      rc::gen::set(&Case::construct_faults,
                   rc::gen::weightedOneOf<std::vector<Fault>>({{3, rc::gen::just(std::vector<Fault>{})},
                                                               {1, faults(construct_points, 2)}})),
      rc::gen::set(&Case::ops, rc::gen::resize(12, rc::gen::container<std::vector<Op>>(op()))),
      rc::gen::set(&Case::destroy_faults,
                   rc::gen::weightedOneOf<std::vector<Fault>>({{3, rc::gen::just(std::vector<Fault>{})},
                                                               {1, faults(end_points, 1)}})));
}

}  // namespace gens

// ---- The real session, scripted ---------------------------------------------------------------

namespace real {

std::exception_ptr make_error(ErrKind k, const std::string& label) {
  switch (k) {
    case ErrKind::aborted: return std::make_exception_ptr(runhooks::AbortedError(label));
    case ErrKind::unavailable: return std::make_exception_ptr(runhooks::UnavailableError(label));
    case ErrKind::out_of_range: return std::make_exception_ptr(runhooks::OutOfRangeError(label));
    case ErrKind::fatal: return std::make_exception_ptr(std::runtime_error(label));
    case ErrKind::none:
    case ErrKind::clean: break;
  }
  return nullptr;
}

// The class and message of the exception being handled, as the model names them.
std::string describe_current() {
  try {
    throw;
  } catch (const runhooks::UsageError& e) {
    return std::string("UsageError: ") + e.what();
  } catch (const runhooks::AbortedError& e) {
    return std::string("AbortedError: ") + e.what();
  } catch (const runhooks::UnavailableError& e) {
    return std::string("UnavailableError: ") + e.what();
  } catch (const runhooks::OutOfRangeError& e) {
    return std::string("OutOfRangeError: ") + e.what();
  } catch (const runhooks::StopIteration& e) {
    return std::string("StopIteration: ") + e.what();
  } catch (const runhooks::Error& e) {
    return std::string("runhooks::Error: ") + e.what();
  } catch (const std::runtime_error& e) {
    return std::string("runtime_error: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("exception: ") + e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

// Everything the scripted hooks, creator, backend and threads share: the script of the current
// operation, the trace, and the coordinator threads' hand-shakes. Threads only write the trace
// while the main thread waits for them, so the trace is deterministic.
class Harness {
 public:
  explicit Harness(const Case& c) : case_(c) {}

  const Case& sequence() const { return case_; }
  Script& script() { return script_; }
  // The caller's session.request_stop(), for the creator's faults (the session may still be in
  // its constructor).
  std::function<void()> stop_session;
  int next_backend() { return ++backends_made_; }

  void add(std::string line) {
    std::lock_guard lock(mutex_);
    trace_.push_back(std::move(line));
  }
  std::vector<std::string> trace() {
    std::lock_guard lock(mutex_);
    return trace_;
  }

  // One scripted call (main thread): its faults in order, as the model's fire().
  void fire(Point p, int hook, const std::function<void()>& request_stop = nullptr) {
    std::exception_ptr thrown;
    script_.on_call(p, hook, [&](const Fault& f, int nth) {
      if (thrown) return;
      const int op = script_.op();
      if (f.action.report != ErrKind::none)
        report(f.action.report, f.action.report_via_throw, report_label(f.action.report, p, hook, nth, op));
      if (f.action.request_stop && request_stop) {
        add(point_name(p, hook) + " requests stop");
        request_stop();
      }
      if (f.action.raise != ErrKind::none) {
        const std::string label = fault_label(f.action.raise, p, hook, nth, op);
        add(point_name(p, hook) + " throws " + label);
        thrown = make_error(f.action.raise, label);
      }
    });
    if (thrown) std::rethrow_exception(thrown);
  }

  // Hook A's after_create_session: one thread per backend, on the coordinator. It waits until
  // the main thread asks it to report, or until its coordinator stops (a join, or the caller's
  // stop); it uses the backend until it ends.
  void start_thread(std::shared_ptr<std::atomic<int>> users, runhooks::Coordinator& coord) {
    // README: the session resets its coordinator in place, so references stay valid.
    if (coord_ != nullptr && coord_ != &coord) add("A received a different Coordinator");
    coord_ = &coord;
    int n = 0;
    {
      std::lock_guard lock(mutex_);
      n = ++threads_started_;
      thread_done_[n] = false;
    }
    users->fetch_add(1);
    coord.start([this, n, users, &coord](std::stop_token stop) {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, stop, [&] { return go_ == n; });
      if (go_ == n) {
        go_ = 0;
        const std::exception_ptr error = go_error_;
        const bool via_throw = go_via_throw_;
        trace_.push_back("A.thread#" + std::to_string(n) + " reports " + go_label_);
        lock.unlock();
        if (!via_throw) coord.request_stop(error);
        lock.lock();
        thread_done_[n] = true;
        changed_.notify_all();
        lock.unlock();
        users->fetch_sub(1);
        if (via_throw) std::rethrow_exception(error);  // Coordinator::start reports it
        return;
      }
      trace_.push_back("A.thread#" + std::to_string(n) + " stopped");
      thread_done_[n] = true;
      changed_.notify_all();
      lock.unlock();
      users->fetch_sub(1);
    });
  }

  // The current backend's thread, if it still runs, reports and ends; returns once the
  // coordinator holds the report.
  void report(ErrKind k, bool via_throw, const std::string& label) {
    std::unique_lock lock(mutex_);
    const int n = threads_started_;
    if (n == 0 || thread_done_[n]) return;
    go_ = n;
    go_error_ = k == ErrKind::clean ? nullptr : make_error(k, label);
    go_via_throw_ = via_throw && k != ErrKind::clean;
    go_label_ = label;
    changed_.notify_all();
    changed_.wait(lock, [&] { return thread_done_[n]; });
    lock.unlock();
    while (!coord_->should_stop()) std::this_thread::yield();
  }

  // The caller stops the coordinator; a running thread sees it and ends: wait for that.
  void caller_stops(runhooks::Coordinator& coord, std::exception_ptr error) {
    if (coord_ != nullptr && coord_ != &coord) add("session.coordinator() is not the Coordinator A received");
    std::unique_lock lock(mutex_);
    const int n = threads_started_;
    const bool live = n != 0 && !thread_done_[n];
    lock.unlock();
    coord.request_stop(std::move(error));
    if (!live) return;
    lock.lock();
    changed_.wait(lock, [&] { return thread_done_[n]; });
  }

 private:
  const Case& case_;
  Script script_;
  int backends_made_ = 0;

  std::mutex mutex_;
  std::condition_variable_any changed_;
  std::vector<std::string> trace_;
  int threads_started_ = 0;
  std::map<int, bool> thread_done_;
  int go_ = 0;
  std::exception_ptr go_error_;
  bool go_via_throw_ = false;
  std::string go_label_;
  runhooks::Coordinator* coord_ = nullptr;
};

Harness* current = nullptr;  // for the log sink

// The session's log lines, reduced to what the contract fixes (no delays, no wording).
void log_sink(runhooks::Severity, std::string_view line) {
  auto after = [&](std::string_view prefix, std::string_view& rest) {
    if (line.substr(0, prefix.size()) != prefix) return false;
    rest = line.substr(prefix.size());
    return true;
  };
  std::string_view rest;
  std::string entry;
  if (after("runhooks: backend lost; re-creating it (attempt ", rest)) {
    const auto comma = rest.find(',');
    const auto colon = rest.find("): ");
    entry = "log: re-creating (attempt " + std::string(rest.substr(0, comma)) + "): " +
            std::string(colon == std::string_view::npos ? rest : rest.substr(colon + 3));
  } else if (after("runhooks: ignoring an error reported to the coordinator while closing (nothing left to recover): ", rest)) {
    entry = "log: close ignores: " + std::string(rest);
  } else if (after("runhooks: error while closing a session ", rest)) {
    entry = "log: error while closing " + std::string(rest);
  } else if (after("runhooks: re-creating the backend failed: ", rest)) {
    entry = "log: re-creating failed: " + std::string(rest);
  } else if (after("runhooks: stopped during recovery (", rest)) {
    // "WHY): the backend is not created again after N failure(s) ..., Last error: WHAT"
    const auto why_end = rest.find("): ");
    const auto count = rest.find(" again after ");
    const auto last = rest.find("Last error: ");
    if (why_end == std::string_view::npos || count == std::string_view::npos || last == std::string_view::npos) {
      entry = "log: " + std::string(line);
    } else {
      const std::string_view n = rest.substr(count + 13, rest.find(' ', count + 13) - (count + 13));
      entry = "log: stopped during recovery (" + std::string(rest.substr(0, why_end)) + ") after " +
              std::string(n) + ": " + std::string(rest.substr(last + 12));
    }
  } else {
    entry = "log: " + std::string(line);
  }
  if (current != nullptr)
    current->add(std::move(entry));
  else
    std::fprintf(stderr, "%s\n", entry.c_str());
}

// A backend that cannot be copied or moved (the session builds it in place), and that tells
// when it is destroyed while a coordinator thread started for it still runs.
class ScriptedBackend {
 public:
  ScriptedBackend(Harness* h, int id) : h_(h), id_(id) {}
  ScriptedBackend(const ScriptedBackend&) = delete;
  ScriptedBackend& operator=(const ScriptedBackend&) = delete;
  ~ScriptedBackend() {
    h_->add(name() + ".destroy");
    if (users_->load() != 0) h_->add(name() + " destroyed while its coordinator thread still runs");
  }

  void run() {
    h_->add(name() + ".run");
    h_->fire(Point::backend_run, -1);
  }

  std::string name() const { return "backend#" + std::to_string(id_); }
  const std::shared_ptr<std::atomic<int>>& users() const { return users_; }

 private:
  Harness* h_;
  int id_;
  std::shared_ptr<std::atomic<int>> users_ = std::make_shared<std::atomic<int>>(0);
};

struct ScriptedCreator {
  using backend_type = ScriptedBackend;
  Harness* h;
  runhooks::RetryLimit retry;

  ScriptedBackend create_session() {
    const int k = h->next_backend();
    h->add("backend#" + std::to_string(k) + ".create");
    h->fire(Point::create, -1, h->stop_session);
    return ScriptedBackend(h, k);
  }
  void initialize(ScriptedBackend& backend) {
    h->add(backend.name() + ".initialize");
    h->fire(Point::initialize, -1, h->stop_session);
  }
  const runhooks::RetryLimit& policy() const { return retry; }
};
static_assert(runhooks::SessionCreatorType<ScriptedCreator>);

template <int I>
struct HookBase {
  Harness* h;
  void begin() {
    h->add(hook_name(I) + ".begin");
    h->fire(Point::begin, I);
  }
  template <class Ctx>
  void before_run(Ctx& run_context) {
    h->add(hook_name(I) + ".before_run");
    h->fire(Point::before_run, I, [&] { run_context.request_stop(); });
  }
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    h->add(hook_name(I) + ".after_run");
    h->fire(Point::after_run, I, [&] { run_context.request_stop(); });
  }
  void end(ScriptedBackend& backend) {
    h->add(hook_name(I) + ".end(" + backend.name() + ")");
    h->fire(Point::end, I);
  }
};

template <int I>
struct PlainHook : HookBase<I> {
  void after_create_session(ScriptedBackend& backend) {
    this->h->add(hook_name(I) + ".after_create_session(" + backend.name() + ")");
    this->h->fire(Point::after_create_session, I);
  }
};

// Hook A of a coordinated sequence: takes the coordinator and starts a thread on it.
struct ThreadHook : HookBase<0> {
  void after_create_session(ScriptedBackend& backend, runhooks::Coordinator& coord) {
    h->add("A.after_create_session(" + backend.name() + ")");
    h->start_thread(backend.users(), coord);
    h->fire(Point::after_create_session, 0);
  }
};

template <class Session>
std::string exec(Session& s, Harness& h, const Op& op, int index) {
  switch (op.kind) {
    case OpKind::run:
      s.run();
      return "ok";
    case OpKind::run_step_fn:
      s.run_step_fn([&](auto& step_context) {
        h.add("step_fn");
        for (int j = 0; j < op.step_runs; ++j) {
          if (op.stop_at == j) {
            h.add("step_fn requests stop");
            step_context.request_stop();
          }
          step_context.run_with_hooks();
        }
        h.fire(Point::step_fn, -1);
        if (op.stop_at == op.step_runs) {
          h.add("step_fn requests stop");
          step_context.request_stop();
        }
      });
      return "ok";
    case OpKind::should_stop:
      return s.should_stop() ? "true" : "false";
    case OpKind::request_stop:
      s.request_stop();
      return "ok";
    case OpKind::close:
      s.close();
      return "ok";
    case OpKind::thread_report:
      h.report(op.report, op.via_throw, kind_name(op.report) + "@thread/op" + std::to_string(index));
      return "ok";
    case OpKind::coord_stop:
      h.caller_stops(s.coordinator(), make_error(op.report, kind_name(op.report) + "@caller/op" + std::to_string(index)));
      return "ok";
    case OpKind::raw_session:
      return s.raw_session().name();
    case OpKind::run_loop: {
      int calls = 0;
      runhooks::run_loop(s, [&] {
        if (++calls == op.loop_ending_at) {
          if (op.loop_end == LoopEnd::request_stop) {
            h.add("loop body requests stop");
            s.request_stop();
            return;
          }
          const std::string label = loop_label(op.loop_end, index);
          h.add("loop body throws " + label);
          if (op.loop_end == LoopEnd::out_of_range) throw runhooks::OutOfRangeError(label);
          if (op.loop_end == LoopEnd::stop_iteration) throw runhooks::StopIteration(label);
          throw std::runtime_error(label);
        }
        s.run();
      });
      return "ok";
    }
  }
  return "?";
}

template <class Session, class... Hooks>
void drive(Harness& h, Hooks... hooks) {
  const Case& c = h.sequence();
  const runhooks::RetryLimit retry{.max_retries = c.max_retries, .initial_backoff_secs = 0.0,
                                   .multiplier = 1.0, .max_backoff_secs = 0.0};
  // Not an optional: the creator's faults call request_stop() while the constructor runs.
  alignas(Session) unsigned char storage[sizeof(Session)];
  Session* const address = reinterpret_cast<Session*>(storage);
  h.stop_session = [address] { address->request_stop(); };
  Session* session = nullptr;
  h.script().start(0, &c.construct_faults);
  h.add("== 0 construct");
  try {
    session = ::new (storage) Session(ScriptedCreator{&h, retry}, hooks...);
    h.add("=> ok");
  } catch (...) {
    h.add("=> threw " + describe_current());
    return;
  }
  int index = 0;
  for (const Op& op : c.ops) {
    ++index;
    h.script().start(index, &op.faults);
    h.add("== " + std::to_string(index) + " " + describe(op));
    try {
      h.add("=> " + exec(*session, h, op, index));
    } catch (...) {
      h.add("=> threw " + describe_current());
    }
  }
  h.script().start(index + 1, &c.destroy_faults);
  h.add("== " + std::to_string(index + 1) + " destroy");
  std::destroy_at(session);
  h.add("=> ok");
}

template <template <class, class...> class SessionT>
void drive_kind(Harness& h) {
  const Case& c = h.sequence();
  if (c.coordinated) {
    if (c.hooks == 2)
      drive<SessionT<ScriptedCreator, ThreadHook, PlainHook<1>>>(h, ThreadHook{{&h}}, PlainHook<1>{{&h}});
    else
      drive<SessionT<ScriptedCreator, ThreadHook, PlainHook<1>, PlainHook<2>>>(h, ThreadHook{{&h}}, PlainHook<1>{{&h}},
                                                                               PlainHook<2>{{&h}});
  } else {
    if (c.hooks == 2)
      drive<SessionT<ScriptedCreator, PlainHook<0>, PlainHook<1>>>(h, PlainHook<0>{{&h}}, PlainHook<1>{{&h}});
    else
      drive<SessionT<ScriptedCreator, PlainHook<0>, PlainHook<1>, PlainHook<2>>>(h, PlainHook<0>{{&h}}, PlainHook<1>{{&h}},
                                                                                 PlainHook<2>{{&h}});
  }
}

std::vector<std::string> run(const Case& c) {
  Harness h(c);
  current = &h;
  if (c.kind == SessionKind::monitored)
    drive_kind<runhooks::MonitoredSession>(h);
  else
    drive_kind<runhooks::SingularMonitoredSession>(h);
  current = nullptr;
  return h.trace();
}

}  // namespace real

// ---- Comparison -----------------------------------------------------------------------------------

std::string difference(const std::vector<std::string>& expected, const std::vector<std::string>& actual) {
  std::size_t first = 0;
  while (first < expected.size() && first < actual.size() && expected[first] == actual[first]) ++first;
  std::ostringstream os;
  os << "The session's trace differs from the model's at line " << first + 1 << ".\n";
  const std::size_t from = first > 15 ? first - 15 : 0;
  for (std::size_t i = from; i < first; ++i) os << "    " << expected[i] << "\n";
  os << "  expected (model, from the contract):\n";
  for (std::size_t i = first; i < expected.size() && i < first + 25; ++i) os << "  - " << expected[i] << "\n";
  os << "  actual (session):\n";
  for (std::size_t i = first; i < actual.size() && i < first + 25; ++i) os << "  + " << actual[i] << "\n";
  return os.str();
}

// What the sequences reached, counted from the model's traces and printed at the end: a check
// that the generators reach the paths worth testing.
class Coverage {
 public:
  void add(const Case& c, const std::vector<std::string>& trace) {
    ++sequences_;
    std::string op;  // the current operation's header
    std::map<std::string, bool> seen;
    auto note = [&](const char* feature) { seen[feature] = true; };
    if (c.kind == SessionKind::singular) note("SingularMonitoredSession");
    for (const std::string& line : trace) {
      auto has = [&](std::string_view text) { return line.find(text) != std::string::npos; };
      if (line.rfind("== ", 0) == 0) op = line;
      if (has("log: re-creating (")) {
        note("re-created a backend");
        if (op.find("should_stop()") != std::string::npos) note("re-created a backend in should_stop()");
        if (op.find("run_step_fn") != std::string::npos) note("re-ran a step_fn after a re-creation");
        if (op.find("construct") != std::string::npos) note("re-created a backend while constructing");
        if (has("(attempt 2)")) note("a re-creation failed and was retried");
      }
      if (has(" reports ")) note("a coordinator thread reported");
      if (has(" stopped") && !has("log: ")) note("a running coordinator thread was joined");
      if (has("log: stopped during recovery")) {
        note("a stop ended a recovery");
        if (op.find("construct") != std::string::npos) note("a stop ended the constructor's recovery");
      }
      if (line.rfind("=> threw", 0) == 0) {
        if (has("@thread") || has("@caller")) note("a coordinator error was raised");
        if (has("The session has no backend")) note("raw_session() without a backend");
        if (has("already closed")) note("closed twice");
        if (has("even after should_stop")) note("run() refused after a stop");
        if ((has("AbortedError") || has("UnavailableError")) && c.kind == SessionKind::monitored)
          note("a preemption error propagated from a MonitoredSession");
      }
      if (has("log: close ignores")) note("close() logged a thread's preemption error");
      if (has("log: error while closing")) note("a closing error was logged");
      if (has("log: re-creating failed")) note("should_stop() logged a failed re-creation");
      if (has(".end") && op.find("run_loop") != std::string::npos) note("run_loop ended cleanly with end()");
      if (line == "=> true" && op.find("should_stop") != std::string::npos) note("should_stop() returned true");
    }
    for (const auto& [feature, yes] : seen) counts_[feature] += yes ? 1 : 0;
  }

  void print(std::ostream& os) const {
    os << "Coverage over " << sequences_ << " sequences:\n";
    for (const auto& [feature, count] : counts_)
      os << "  " << (100.0 * static_cast<double>(count) / static_cast<double>(sequences_)) << "% " << feature << "\n";
  }

 private:
  long sequences_ = 0;
  std::map<std::string, long> counts_;
};

// ---- The session's known deviations from the contract --------------------------------------

// Tolerated until the session is fixed (protocol_model.hpp's Deviations; tests/property/README.md
// explains each). A tolerance makes the model predict the deviation, so a fix turns this test red
// until its name is removed here. RUNHOOKS_PROPERTY_TOLERATE replaces the list; "none" checks the
// contract alone.
constexpr const char* known_deviations = "";

bool set_deviation(Deviations& d, const std::string& name, bool on) {
  bool* flags[] = {&d.give_up_raises_step_error,      &d.step_fn_errors_substituted,
                   &d.singular_no_substitution,       &d.recovery_log_names_other_error,
                   &d.constructor_drops_thread_error, &d.hook_stop_refusal_not_substituted,
                   &d.no_backend_step_fn_recovers,    &d.thread_error_raised_twice};
  for (int i = 0; i < 8; ++i) {
    if (name == "D" + std::to_string(i + 1)) {
      *flags[i] = on;
      return true;
    }
  }
  return false;
}

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream list(names);
  std::string name;
  while (std::getline(list, name, ','))
    if (!name.empty() && name != "none") out.push_back(name);
  return out;
}

std::vector<std::string> tolerated_names() {
  const char* env = std::getenv("RUNHOOKS_PROPERTY_TOLERATE");
  return split_names(env != nullptr ? env : known_deviations);
}

Deviations deviations_of(const std::vector<std::string>& names) {
  Deviations d;
  for (const std::string& name : names)
    if (!set_deviation(d, name, true)) throw std::invalid_argument("RUNHOOKS_PROPERTY_TOLERATE: unknown deviation " + name);
  return d;
}

// Each deviation's minimal sequence, as RapidCheck shrank it.
Fault at(Point p, int hook, int nth, Action a) { return Fault{p, hook, nth, a}; }
Action throws(ErrKind k) { return Action{ErrKind::none, false, false, k}; }
Op op_of(OpKind kind, std::vector<Fault> faults = {}) {
  Op o;
  o.kind = kind;
  o.faults = std::move(faults);
  return o;
}
Op coordinator_stop(ErrKind k) {
  Op o = op_of(OpKind::coord_stop);
  o.report = k;
  return o;
}
Op thread_report(ErrKind k) {
  Op o = op_of(OpKind::thread_report);
  o.report = k;
  return o;
}
Op step_fn(int runs, int stop_at, std::vector<Fault> faults = {}) {
  Op o = op_of(OpKind::run_step_fn, std::move(faults));
  o.step_runs = runs;
  o.stop_at = stop_at;
  return o;
}
Case sequence_of(SessionKind kind, bool coordinated, int max_retries, std::vector<Op> ops,
                 std::vector<Fault> construct_faults = {}) {
  Case c;
  c.kind = kind;
  c.coordinated = coordinated;
  c.max_retries = max_retries;
  c.ops = std::move(ops);
  c.construct_faults = std::move(construct_faults);
  return c;
}

std::map<std::string, Case> deviation_cases() {
  const auto monitored = SessionKind::monitored;
  const auto singular = SessionKind::singular;
  const Action report_fatal_throw_aborted{ErrKind::fatal, false, false, ErrKind::aborted};
  const Action report_fatal_throw_out_of_range{ErrKind::fatal, false, false, ErrKind::out_of_range};
  const Action request_stop{ErrKind::none, false, true, ErrKind::none};
  return {
      {"D1", sequence_of(monitored, false, 1,
                         {op_of(OpKind::run, {at(Point::create, -1, 1, throws(ErrKind::aborted)),
                                              at(Point::before_run, 0, 1, throws(ErrKind::aborted))})})},
      {"D2", sequence_of(monitored, false, 0, {coordinator_stop(ErrKind::aborted), step_fn(0, 0)})},
      {"D3", sequence_of(singular, true, 0,
                         {thread_report(ErrKind::aborted),
                          op_of(OpKind::run, {at(Point::before_run, 0, 1, throws(ErrKind::out_of_range))})})},
      {"D4", sequence_of(monitored, true, 1,
                         {thread_report(ErrKind::aborted),
                          op_of(OpKind::run, {at(Point::before_run, 0, 1, throws(ErrKind::out_of_range))})})},
      {"D5", sequence_of(monitored, true, 1, {},
                         {at(Point::create, -1, 1, throws(ErrKind::aborted)),
                          at(Point::after_create_session, 0, 1, report_fatal_throw_out_of_range)})},
      {"D6", sequence_of(monitored, true, 1,
                         {op_of(OpKind::run, {at(Point::before_run, 0, 1, request_stop)}),
                          thread_report(ErrKind::aborted), op_of(OpKind::run)})},
      {"D7", sequence_of(monitored, false, 1,
                         {coordinator_stop(ErrKind::aborted),
                          op_of(OpKind::should_stop, {at(Point::create, -1, 1, throws(ErrKind::aborted))}),
                          step_fn(1, -1)})},
      {"D8", sequence_of(monitored, true, 0,
                         {op_of(OpKind::run, {at(Point::before_run, 0, 1, report_fatal_throw_aborted)}),
                          step_fn(0, -1, {at(Point::step_fn, -1, 1, throws(ErrKind::aborted))})})},
  };
}

// For each tolerated deviation: its sequence agrees with the tolerant model, and disagrees once
// that one tolerance is dropped (else the session was fixed: remove the name). With `explain`,
// prints each sequence and the difference the contract sees.
bool check_deviation_cases(const std::vector<std::string>& tolerated, bool explain) {
  bool ok = true;
  const std::map<std::string, Case> cases = deviation_cases();
  for (const std::string& name : tolerated) {
    const auto it = cases.find(name);
    if (it == cases.end()) continue;
    const Case& c = it->second;
    const std::vector<std::string> actual = real::run(c);
    Deviations all = deviations_of(tolerated);
    const std::vector<std::string> tolerant = Model(c, all).run();
    set_deviation(all, name, false);
    const std::vector<std::string> strict = Model(c, all).run();
    if (tolerant != actual) {
      ok = false;
      std::cerr << name << ": the session no longer behaves as the tolerance for " << name
                << " predicts; if it was fixed, remove " << name << " from known_deviations.\n";
      showValue(c, std::cerr);
      std::cerr << difference(tolerant, actual) << "\n";
    } else if (strict == actual) {
      ok = false;
      std::cerr << name << ": its sequence now agrees with the contract: remove " << name
                << " from known_deviations.\n";
    } else if (explain) {
      std::cerr << "---- " << name << "\n";
      showValue(c, std::cerr);
      std::cerr << difference(strict, actual) << "\n";
    }
  }
  return ok;
}

}  // namespace protocol

int main(int argc, char** argv) {
  using namespace protocol;
  runhooks::set_log_sink(&real::log_sink);
  const bool explain = argc > 1 && std::string_view(argv[1]) == "--explain";
  if (argc > 1 && !explain) {
    std::cerr << "usage: " << argv[0] << " [--explain]\n"
              << "  RUNHOOKS_PROPERTY_SEQUENCES=N  sequences to check (default 10000; RC_PARAMS max_success wins)\n"
              << "  RUNHOOKS_PROPERTY_TOLERATE=... known deviations to tolerate (default " << known_deviations
              << "; none: the contract alone)\n"
              << "  --explain                      print each tolerated deviation's sequence and difference\n";
    return 2;
  }

  const std::vector<std::string> tolerated = tolerated_names();
  const Deviations deviations = deviations_of(tolerated);
  if (!check_deviation_cases(tolerated, explain)) return 1;
  if (explain) return 0;

  const char* sequences_env = std::getenv("RUNHOOKS_PROPERTY_SEQUENCES");
  const std::string sequences = sequences_env != nullptr && *sequences_env != '\0' ? sequences_env : "10000";
  const char* params_env = std::getenv("RC_PARAMS");
  std::string params = params_env != nullptr ? params_env : "";
  if (params.find("max_success") == std::string::npos) {
    params += (params.empty() ? "" : " ") + std::string("max_success=") + sequences;
    setenv("RC_PARAMS", params.c_str(), 1);
  }
  std::string joined;
  for (const std::string& name : tolerated) joined += (joined.empty() ? "" : ",") + name;
  std::cerr << "Tolerated deviations from the contract: " << (joined.empty() ? "none" : joined)
            << " (see tests/property/README.md)\n";

  Coverage coverage;  // counts the shrinking steps' sequences too; a rough check
  const bool ok = rc::check("MonitoredSession and SingularMonitoredSession agree with the protocol model", [&] {
    const Case c = *gens::sequence();
    const std::vector<std::string> expected = Model(c, deviations).run();
    const std::vector<std::string> actual = real::run(c);
    coverage.add(c, expected);
    if (expected != actual) RC_FAIL(difference(expected, actual));
  });
  coverage.print(std::cerr);
  return ok ? 0 : 1;
}
