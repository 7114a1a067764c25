// Regression tests for the session's error paths (issue 9, defects 1, 2, 3, 8, 9), and for the
// two per-step mechanisms the session offers hooks: the run context's one global-step read and
// the profiling hook's spans. Each defect's test failed before its fix.
#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <support/fakes.hpp>

namespace {

using namespace std::chrono_literals;

// A backend whose destructor checks that no coordinator thread still uses it: each thread a
// hook starts registers in `users` while it runs.
struct GuardedBackend {
  std::int64_t step = 0;
  std::shared_ptr<std::atomic<int>> users = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<int> destroyed_while_used;  // shared with the test
  std::optional<std::exception_ptr> throw_on_run;

  void run() {
    if (throw_on_run) {
      const std::exception_ptr error = *throw_on_run;
      throw_on_run.reset();
      std::rethrow_exception(error);
    }
    ++step;
  }
  std::int64_t global_step() const { return step; }
  ~GuardedBackend() {
    if (destroyed_while_used && users->load() != 0) ++*destroyed_while_used;
  }
};

// Starts a thread on the coordinator at every (re)creation; the thread "uses" the backend until
// its stop token fires (or 5 s pass, so that a regression fails instead of hanging the suite).
struct ThreadStartingHook {
  int* stopped_by_token;
  int* timed_out;
  template <class Backend>
  void after_create_session(Backend& backend, runhooks::Coordinator& coord) {
    auto users = backend.users;
    users->fetch_add(1);
    coord.start([users, stopped = stopped_by_token, late = timed_out](std::stop_token stop) {
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (!stop.stop_requested() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(1ms);
      ++*(stop.stop_requested() ? stopped : late);
      users->fetch_sub(1);
    });
  }
};

// Throws AbortedError from after_create_session at the creations listed.
struct FailingCreationHook {
  std::vector<int> fail_at;
  int creations = 0;
  template <class Backend>
  void after_create_session(Backend&) {
    ++creations;
    for (int n : fail_at)
      if (n == creations) throw runhooks::AbortedError("lost while creating");
  }
};

TEST_CASE("defect 1: every coordinator generation is stopped and joined before its backend goes, whichever hook fails") {
  auto destroyed_while_used = std::make_shared<int>(0);
  int stopped_by_token = 0, timed_out = 0, made = 0;
  {
    runhooks::MonitoredSession session{
        runhooks::SessionCreator{[&] {
                                   ++made;
                                   GuardedBackend b;
                                   b.destroyed_while_used = destroyed_while_used;
                                   if (made == 1)
                                     b.throw_on_run = std::make_exception_ptr(
                                         runhooks::AbortedError("lost"));
                                   return b;
                                 },
                                 runhooks::RetryLimit{.max_retries = 5}},
        ThreadStartingHook{&stopped_by_token, &timed_out},
        // creation 2 (the first recovery) fails after the first hook started its thread
        FailingCreationHook{.fail_at = {2}}};
    session.run();  // aborts on backend 1, re-creates (fails once), succeeds on backend 3
    CHECK(made == 3);
    CHECK(session.raw_session().step == 1);
    session.close();  // must not block on a thread left running
  }
  CHECK(*destroyed_while_used == 0);
  CHECK(stopped_by_token == 3);
  CHECK(timed_out == 0);
}

struct FatalOnSecond {
  int creations = 0;
  template <class Backend>
  void after_create_session(Backend&) {
    if (++creations == 2) throw std::runtime_error("fatal while creating");
  }
};

TEST_CASE("defect 1: a fatal error from after_create_session during recovery also joins first") {
  auto destroyed_while_used = std::make_shared<int>(0);
  int stopped_by_token = 0, timed_out = 0, made = 0;
  runhooks::MonitoredSession session{
      [&] {
        ++made;
        GuardedBackend b;
        b.destroyed_while_used = destroyed_while_used;
        if (made == 1) b.throw_on_run = std::make_exception_ptr(runhooks::AbortedError("lost"));
        return b;
      },
      ThreadStartingHook{&stopped_by_token, &timed_out}, FatalOnSecond{}};
  CHECK_THROWS_WITH_AS(session.run(), "fatal while creating", std::runtime_error);
  CHECK(*destroyed_while_used == 0);
  CHECK(stopped_by_token == 2);
  CHECK(timed_out == 0);
  CHECK(session.should_stop());
}

struct ReportingHook {
  runhooks::Coordinator* coord = nullptr;
  template <class Backend>
  void after_create_session(Backend&, runhooks::Coordinator& c) {
    coord = &c;
  }
};

TEST_CASE("defect 2: a thread's non-preemption error is raised from the run() that was recovering") {
  // TF: _RecoverableSession.run closes the lost session, and _CoordinatedSession.close's join
  // raises what the thread reported.
  int made = 0;
  ReportingHook reporter;
  runhooks::MonitoredSession session{[&] {
                                       ++made;
                                       GuardedBackend b;
                                       if (made == 1)
                                         b.throw_on_run = std::make_exception_ptr(
                                             runhooks::AbortedError("lost"));
                                       return b;
                                     },
                                     std::ref(reporter)};
  reporter.coord->request_stop(std::make_exception_ptr(std::runtime_error("thread failed")));
  CHECK_THROWS_WITH_AS(session.run(), "thread failed", std::runtime_error);
  CHECK(made == 1);  // not re-created: the thread's error ends the session, as in TF
  CHECK(session.should_stop());
  // Raised once: close() does not raise it again.
  CHECK_NOTHROW(session.close());
}

// Its thread reports an error only when it is stopped, once per process run of the test.
struct LateReporter {
  static inline std::atomic<bool> done{false};
  template <class Backend>
  void after_create_session(Backend&, runhooks::Coordinator& coord) {
    coord.start([](std::stop_token stop) {
      while (!stop.stop_requested()) std::this_thread::sleep_for(1ms);
      if (!done.exchange(true)) throw std::runtime_error("failed while stopping");
    });
  }
};

TEST_CASE("defect 2: a thread's error reported while a recovery joins it is raised, never dropped") {
  // The thread of generation 1 reports its error only when it is stopped, that is while the
  // session joins it during the recovery from the backend's AbortedError.
  LateReporter::done = false;
  int made = 0;
  auto make = [&] {
    ++made;
    GuardedBackend b;
    if (made == 1) b.throw_on_run = std::make_exception_ptr(runhooks::AbortedError("lost"));
    return b;
  };
  runhooks::MonitoredSession session{make, LateReporter{}};
  CHECK_THROWS_WITH_AS(session.run(), "failed while stopping", std::runtime_error);
  CHECK(made == 1);
  CHECK(session.should_stop());
  CHECK_THROWS_WITH_AS(session.run(), "Run called even after should_stop requested.",
                       runhooks::UsageError);
  CHECK_NOTHROW(session.close());
}

TEST_CASE("defect 3: close() of a MonitoredSession logs a preemption error reported at shutdown; a singular one throws it") {
  const fakes::LogCapture logs;
  {
    runhooks::MonitoredSession session{[] { return GuardedBackend{}; }};
    session.run();
    session.coordinator().request_stop(
        std::make_exception_ptr(runhooks::UnavailableError("parameter server went away")));
    CHECK_NOTHROW(session.close());
  }
  CHECK(logs.contains("parameter server went away"));
  CHECK(logs.contains("while closing"));

  runhooks::SingularMonitoredSession singular{GuardedBackend{}};
  singular.run();
  singular.coordinator().request_stop(
      std::make_exception_ptr(runhooks::AbortedError("lost at shutdown")));
  CHECK_THROWS_WITH_AS(singular.close(), "lost at shutdown", runhooks::AbortedError);
}

TEST_CASE("defect 3: a non-preemption error reported at shutdown is still thrown by close()") {
  runhooks::MonitoredSession session{[] { return GuardedBackend{}; }};
  session.coordinator().request_stop(std::make_exception_ptr(std::runtime_error("worker died")));
  CHECK_THROWS_WITH_AS(session.close(), "worker died", std::runtime_error);
}

TEST_CASE("defect 8: RetryLimit's fields are validated, naming the field and the value") {
  auto make = [] { return GuardedBackend{}; };
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(runhooks::SessionCreator(make, runhooks::RetryLimit{.initial_backoff_secs = inf}),
                       "runhooks: RetryLimit::initial_backoff_secs must be a number of seconds at "
                       "least 0 and at most 1e+09, got inf.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::SessionCreator(make, runhooks::RetryLimit{.initial_backoff_secs = -1}),
                       "runhooks: RetryLimit::initial_backoff_secs must be a number of seconds at "
                       "least 0 and at most 1e+09, got -1.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::SessionCreator(make, runhooks::RetryLimit{.max_backoff_secs = nan}),
                       "runhooks: RetryLimit::max_backoff_secs must be a number of seconds at "
                       "least 0 and at most 1e+09, got nan.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::SessionCreator(make, runhooks::RetryLimit{.max_backoff_secs = 1e300}),
                       "runhooks: RetryLimit::max_backoff_secs must be a number of seconds at "
                       "least 0 and at most 1e+09, got 1e+300.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::SessionCreator(make, runhooks::RetryLimit{.multiplier = 0.5}),
                       "runhooks: RetryLimit::multiplier must be at least 1 and at most 1e9, got 0.5.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(runhooks::SessionCreator(make, runhooks::RetryLimit{.max_retries = -1}),
                       "runhooks: RetryLimit::max_retries must be at least 0, got -1.",
                       std::invalid_argument);
  // Large multipliers saturate at the cap instead of overflowing.
  const runhooks::RetryLimit steep{.max_retries = 2000, .initial_backoff_secs = 1, .multiplier = 1e9,
                                   .max_backoff_secs = 30};
  CHECK(steep.next_delay(2000) == 30.0);
}

TEST_CASE("defect 8: a custom retry policy's delay is checked before it is slept") {
  struct Infinite {
    std::optional<double> next_delay(int) const { return std::numeric_limits<double>::infinity(); }
  };
  int made = 0;
  runhooks::MonitoredSession session{runhooks::SessionCreator{[&] {
                                                                ++made;
                                                                GuardedBackend b;
                                                                b.throw_on_run = std::make_exception_ptr(
                                                                    runhooks::AbortedError("lost"));
                                                                return b;
                                                              },
                                                              Infinite{}}};
  CHECK_THROWS_WITH_AS(session.run(),
                       "runhooks: the retry policy's next_delay() must be a number of seconds at "
                       "least 0 and at most 1e+09, got inf.",
                       std::invalid_argument);
}

TEST_CASE("defect 9: run_step_fn after close() throws, and neither runs the step nor reaches the backend") {
  runhooks::MonitoredSession session{GuardedBackend{}};
  session.run();
  session.close();
  bool ran = false;
  CHECK_THROWS_WITH_AS(session.run_step_fn([&](auto& step_context) {
                         ran = true;
                         step_context.session().run();
                       }),
                       "Run called on a closed session.", runhooks::UsageError);
  CHECK_FALSE(ran);
  CHECK(session.raw_session().step == 1);
  CHECK_THROWS_WITH_AS(session.run(), "Run called on a closed session.", runhooks::UsageError);
}

TEST_CASE("stop_grace_period_secs is validated") {
  runhooks::MonitoredSession session{GuardedBackend{}};
  CHECK_THROWS_WITH_AS(session.set_stop_grace_period_secs(-1),
                       "runhooks: stop_grace_period_secs must be a number of seconds at least 0 "
                       "and at most 1e+09, got -1.",
                       std::invalid_argument);
  CHECK_NOTHROW(session.set_stop_grace_period_secs(0.5));
}

// --- the run context's global step: one read per run ------------------------------------------

struct CountingReads {
  std::int64_t step = 0;
  mutable int reads = 0;
  void run() { ++step; }
  std::int64_t global_step() const {
    ++reads;
    return step;
  }
};

struct ReadsStepBeforeAndAfter {
  std::vector<std::int64_t> before, after;
  template <class Ctx>
  void before_run(Ctx& run_context) {
    before.push_back(run_context.global_step());
  }
  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) {
    after.push_back(run_context.global_step());
  }
};

TEST_CASE("run_context.global_step(): read once before the step and once after it, however many hooks ask") {
  runhooks::MonitoredSession session{CountingReads{}, ReadsStepBeforeAndAfter{},
                                     ReadsStepBeforeAndAfter{}, ReadsStepBeforeAndAfter{}};
  session.run();
  session.run();
  CHECK(session.raw_session().reads == 4);
  CHECK(session.hook<2>().before == std::vector<std::int64_t>{0, 1});
  CHECK(session.hook<2>().after == std::vector<std::int64_t>{1, 2});
}

// --- the profiling hook -------------------------------------------------------------------

struct FakeProfiler {
  std::vector<bool> plan;  // which runs to profile
  std::size_t run = 0;
  std::vector<std::string> spans;
  bool profile_this_step() { return run < plan.size() && plan[run++]; }
  void record_span(std::string_view who, std::string_view what, double begin, double end) {
    CHECK(end >= begin);
    spans.push_back(std::string(who.substr(who.rfind(':') + 1)) + "." + std::string(what));
  }
};

struct Timed {
  template <class Ctx>
  void before_run(Ctx&) {}
  template <class Ctx, class Values>
  void after_run(Ctx&, const Values&) {}
};
struct OnlyEnd {
  template <class B>
  void end(B&) {}
};

TEST_CASE("a profiling hook receives a span per callback, the step and the fetches, on the steps it asks for only") {
  runhooks::MonitoredSession session{CountingReads{}, Timed{}, OnlyEnd{},
                                     FakeProfiler{.plan = {false, true, false}, .run = 0, .spans = {}}};
  session.run();
  CHECK(session.hook<FakeProfiler>().spans.empty());
  session.run();
  CHECK(session.hook<FakeProfiler>().spans ==
        std::vector<std::string>{"Timed.before_run", "CountingReads.run", "CountingReads.fetch",
                                 "Timed.after_run"});
  session.run();
  CHECK(session.hook<FakeProfiler>().spans.size() == 4);
}

}  // namespace
