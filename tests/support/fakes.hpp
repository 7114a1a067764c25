// Shared fakes for the session tests, after the helpers of TensorFlow's monitored_session_test.py
// (FakeHook, RaiseOnceAtCountN, the abort-at-N sessions) with a scripted backend in place of a graph.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>

namespace fakes {

// What the backend can produce (fetch) and accept (feed). Values follow TensorFlow's tests:
// a_tensor is [0], another_tensor [5], third_tensor [10].
struct ATensor : runhooks::Key<int> {};
struct AnotherTensor : runhooks::Key<int> {};
struct ThirdTensor : runhooks::Key<int> {};
struct GlobalStep : runhooks::Key<std::int64_t> {};  // the global step after the step
struct FeedA : runhooks::Key<int> {};                  // placeholders a, b, c of testOnlyHooksHaveFeeds
struct FeedB : runhooks::Key<int> {};
struct FeedC : runhooks::Key<int> {};
struct SumABC : runhooks::Key<int> {};                 // a + b + c as fed to the step (0 if not fed)
struct Increment : runhooks::Key<std::int64_t> {};     // this step's global-step increment
struct C : runhooks::Key<double> {};                   // placeholder c of the step_fn tests
struct V : runhooks::Key<double> {};                   // v = identity(c)
struct VV : runhooks::Key<double> {};                  // vv = constant(3.2)
struct HookAdd : runhooks::Key<double> {};             // added to var by the step (fed by a hook)
struct CallerAdd : runhooks::Key<double> {};           // added to var by the step (fed by the caller)
struct Var : runhooks::Key<double> {};                 // the variable var

// The order in which hooks and backend were called, as "A.before_run", "backend.run", ...
struct CallLog {
  std::vector<std::string> entries;
  void add(std::string entry) { entries.push_back(std::move(entry)); }
};

// The inputs one step received.
struct Inputs {
  std::optional<int> a, b, c;
  std::optional<double> c_double, hook_add, caller_add;
  std::optional<std::int64_t> increment;
};

// One training step per run(): adds `increment` (or the fed Increment) to the global step and
// the fed HookAdd/CallerAdd to var. Feeds apply to the next run() only. throw_at(k, e) makes the
// k-th run() (1-based, counted per backend) throw e once, before it changes anything.
struct FakeBackend {
  std::int64_t step = 0;
  std::int64_t increment = 1;
  double var = 0.0;
  double* graph_state = nullptr;  // state that outlives this backend (TF: the same tf.Session)
  int id = 0;                     // which backend this is, for tests that re-create it
  int runs = 0;                   // calls to run(), including those that threw
  Inputs pending{};
  Inputs last{};                  // what the last completed step was fed
  std::vector<Inputs> fed;        // what each completed step was fed
  std::map<int, std::exception_ptr> throws;
  CallLog* log = nullptr;

  template <class E>
  void throw_at(int run, E error) {
    throws[run] = std::make_exception_ptr(std::move(error));
  }

  void run() {
    ++runs;
    if (log) log->add("backend.run");
    if (auto it = throws.find(runs); it != throws.end()) {
      const std::exception_ptr error = it->second;
      throws.erase(it);
      pending = {};
      std::rethrow_exception(error);
    }
    step += pending.increment.value_or(increment);
    var += pending.hook_add.value_or(0.0) + pending.caller_add.value_or(0.0);
    last = pending;
    fed.push_back(pending);
    pending = {};
  }

  // A raw op outside the hooked run (TF: step_context.session.run(graph_side_effect)).
  void bump_graph_state(double by) { *graph_state += by; }

  std::int64_t global_step() const { return step; }

  int fetch(ATensor) const { return 0; }
  int fetch(AnotherTensor) const { return 5; }
  int fetch(ThirdTensor) const { return 10; }
  std::int64_t fetch(GlobalStep) const { return step; }
  int fetch(SumABC) const { return last.a.value_or(0) + last.b.value_or(0) + last.c.value_or(0); }
  double fetch(V) const { return last.c_double.value_or(0.0); }
  double fetch(VV) const { return 3.2; }
  double fetch(Var) const { return var; }

  void feed(FeedA, int v) { pending.a = v; }
  void feed(FeedB, int v) { pending.b = v; }
  void feed(FeedC, int v) { pending.c = v; }
  void feed(C, double v) { pending.c_double = v; }
  void feed(Increment, std::int64_t v) { pending.increment = v; }
  void feed(HookAdd, double v) { pending.hook_add = v; }
  void feed(CallerAdd, double v) { pending.caller_add = v; }
};

// TF's `session.run(gstep)`: a step that reads the global step and does not change it.
template <class Session>
std::int64_t read_gstep(Session& session) {
  const auto values = session.run(
      runhooks::SessionRunArgs{runhooks::fetch<GlobalStep>(), runhooks::feed<Increment>(0)});
  return *values[GlobalStep{}];
}

// TF's `session.run(do_step)` with do_step = assign_add(gstep, 1): returns the new value.
template <class Session>
std::int64_t do_step(Session& session) {
  return *session.run(runhooks::SessionRunArgs{runhooks::fetch<GlobalStep>()})[GlobalStep{}];
}

// TF's `session.run(v, feed_dict={c: value})`.
template <class Session>
double run_v(Session& session, double value) {
  return *session.run(runhooks::SessionRunArgs{runhooks::fetch<V>(), runhooks::feed<C>(value)})[V{}];
}

struct CallCounts {
  int begin = 0;
  int after_create_session = 0;
  int before_run = 0;
  int after_run = 0;
  int end = 0;
};

// TF's FakeHook: counts calls per point, returns `request` from before_run (nothing when Request
// is void), records what the last run showed it, and requests a stop in after_run when
// `should_stop` is set.
template <class Request = void>
struct FakeHook {
  using request_type = std::conditional_t<std::is_void_v<Request>, runhooks::SessionRunArgs<>, Request>;

  std::string name = "hook";
  CallLog* log = nullptr;
  CallCounts call_counter{};
  bool should_stop = false;
  request_type request{};

  // What the hook saw last.
  const void* last_original_args = nullptr;
  const void* last_run_context_session = nullptr;
  bool stop_requested_in_after_run = false;
  std::optional<runhooks::SessionRunValues<request_type>> last_run_values;
  const void* last_created_session = nullptr;
  runhooks::Coordinator* last_coord = nullptr;
  const void* last_end_session = nullptr;
  std::int64_t global_step_in_after_run = -1;

  void begin() {
    ++call_counter.begin;
    note("begin");
  }
  template <class Backend>
  void after_create_session(Backend& session, runhooks::Coordinator& coord) {
    ++call_counter.after_create_session;
    last_created_session = &session;
    last_coord = &coord;
    note("after_create_session");
  }
  template <class Ctx>
  auto before_run(Ctx& run_context) {
    ++call_counter.before_run;
    last_original_args = &run_context.original_args();
    last_run_context_session = &run_context.session();
    note("before_run");
    if constexpr (!std::is_void_v<Request>) return request;
  }
  template <class Ctx>
  void after_run(Ctx& run_context, const runhooks::SessionRunValues<request_type>& run_values) {
    ++call_counter.after_run;
    last_run_values = run_values;
    stop_requested_in_after_run = run_context.stop_requested();
    if constexpr (runhooks::HasGlobalStep<std::remove_cvref_t<decltype(run_context.session())>>)
      global_step_in_after_run = run_context.session().global_step();
    note("after_run");
    if (should_stop) run_context.request_stop();
  }
  template <class Backend>
  void end(Backend& session) {
    ++call_counter.end;
    last_end_session = &session;
    note("end");
  }

 private:
  void note(const char* point) {
    if (log) log->add(name + "." + point);
  }
};

// TF's RaiseOnceAtCountN: each before_run decrements n; the one that brings it to 0 raises `ex`.
struct RaiseOnceAtCountN {
  int n;
  std::exception_ptr ex;
  bool raised = false;

  template <class E>
  RaiseOnceAtCountN(int count, E error) : n(count), ex(std::make_exception_ptr(std::move(error))) {}

  template <class Ctx>
  void before_run(Ctx&) {
    --n;
    if (n == 0) {
      raised = true;
      std::rethrow_exception(ex);
    }
  }
};

// TF's CountingSessionCreator: counts the backends it makes. `make` builds each one.
template <class Make>
struct CountingSessionCreator {
  Make make;
  int* number_of_sessions_created;
  auto operator()() {
    ++*number_of_sessions_created;
    return make();
  }
};
template <class Make>
CountingSessionCreator(Make, int*) -> CountingSessionCreator<Make>;

// Errors TF's tests raise that runhooks has no class for.
struct UnknownError : runhooks::Error {
  using runhooks::Error::Error;
};
struct CancelledError : runhooks::Error {
  using runhooks::Error::Error;
};

// Captures runhooks::log lines while alive (the sink is a plain function pointer, so the lines
// go to one static buffer; tests using it run one at a time).
class LogCapture {
 public:
  LogCapture() { previous_ = runhooks::set_log_sink(&sink); lines().clear(); }
  ~LogCapture() { runhooks::set_log_sink(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  static std::vector<std::string>& lines() {
    static std::vector<std::string> captured;
    return captured;
  }
  bool contains(const std::string& text) const {
    for (const auto& line : lines())
      if (line.find(text) != std::string::npos) return true;
    return false;
  }

 private:
  static void sink(runhooks::Severity, std::string_view line) {
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    lines().emplace_back(line);
  }
  runhooks::LogSink previous_;
};

}  // namespace fakes
