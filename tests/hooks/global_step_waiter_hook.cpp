// GlobalStepWaiterHook: TensorFlow's GlobalStepWaiterHookTest (cases D21-D23 of tf-semantics.md
// §3) with a manual clock standing in for the mocked time.sleep, K7, and runhooks' additions:
// stopping the wait through the coordinator, a timeout, and waking on a shared global step.

#include <runhooks/backends/shared_global_step.hpp>
#include <runhooks/clock.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hooks/global_step_waiter_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_run_args.hpp>
#include <runhooks/session_run_context.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using runhooks::GlobalStepWaiterHook;
using runhooks::ManualClock;
using runhooks::Severity;

namespace {

// Captures runhooks' info lines for the life of the object. Thread-safe: the threaded test logs
// from a worker thread.
std::mutex& lines_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::vector<std::string>& captured_lines() {
  static std::vector<std::string> lines;
  return lines;
}
class LogCapture {
 public:
  LogCapture()
      : previous_(runhooks::set_log_sink([](Severity, std::string_view line) {
          const std::lock_guard lock(lines_mutex());
          captured_lines().emplace_back(line);
        })) {
    const std::lock_guard lock(lines_mutex());
    captured_lines().clear();
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  ~LogCapture() { runhooks::set_log_sink(previous_); }

  std::vector<std::string> lines() const {
    const std::lock_guard lock(lines_mutex());
    return captured_lines();
  }

 private:
  runhooks::LogSink previous_;
};

// A backend that counts its global-step reads (TensorFlow's test counts session runs).
struct StepBackend {
  std::int64_t step = 0;
  mutable int reads = 0;

  void run() { ++step; }
  std::int64_t global_step() const {
    ++reads;
    return step;
  }
};

// TensorFlow's tests call before_run() by hand with a SessionRunContext on the session.
template <class Hook, class Backend>
void call_before_run(Hook& hook, Backend& backend) {
  const runhooks::SessionRunArgs<> args;
  runhooks::SessionRunContext<Backend> context(args, backend);
  hook.before_run(context);
}

// TensorFlow's mocked time.sleep: the i-th sleep sets the global step to schedule[i]; one sleep
// more than the schedule fails the test. The callback refers to `clock`, never copies it: a copy
// shares the state that stores the callback, a cycle that would never be freed.
void set_step_on_sleep(ManualClock& clock, std::function<void(std::int64_t)> set_step,
                       std::vector<std::int64_t> schedule) {
  clock.on_sleep([&clock, set_step = std::move(set_step), schedule = std::move(schedule)] {
    const auto i = static_cast<std::size_t>(clock.sleeps() - 1);
    REQUIRE_MESSAGE(i < schedule.size(), "slept once more than expected");
    set_step(schedule[i]);
  });
}

}  // namespace

TEST_CASE("D21 test_not_wait_for_step_zero") {
  const LogCapture log;
  ManualClock clock;
  GlobalStepWaiterHook hook(0, {}, clock);
  hook.begin();
  StepBackend backend;
  call_before_run(hook, backend);
  CHECK(hook.started());
  CHECK(backend.reads == 0);  // no global-step read at all
  CHECK(clock.sleeps() == 0);
  CHECK(log.lines().empty());
}

TEST_CASE("D21 a negative wait_until_step does not wait either") {
  ManualClock clock;
  GlobalStepWaiterHook hook(-5, {}, clock);
  hook.begin();
  StepBackend backend;
  call_before_run(hook, backend);
  CHECK(hook.started());
  CHECK(backend.reads == 0);
  CHECK(clock.sleeps() == 0);
}

TEST_CASE("D22 test_wait_for_step") {
  const LogCapture log;
  ManualClock clock;
  GlobalStepWaiterHook hook(1000, {}, clock);
  hook.begin();
  StepBackend backend;
  set_step_on_sleep(clock, [&](std::int64_t step) { backend.step = step; }, {500, 1100});

  call_before_run(hook, backend);
  CHECK(hook.started());
  CHECK(clock.sleeps() == 2);
  CHECK(clock.now() == doctest::Approx(2 * 0.5));  // TensorFlow sleeps 0.5 s between reads
  CHECK(backend.reads == 3);                        // 0, 500, 1100
  CHECK(log.lines() ==
        std::vector<std::string>{"Waiting for global step 1000 before starting training."});

  // Waits only before the first run: no read, no sleep, no log the second time.
  call_before_run(hook, backend);
  CHECK(clock.sleeps() == 2);
  CHECK(backend.reads == 3);
  CHECK(log.lines().size() == 1);
}

TEST_CASE("D23 the progress line comes after the step advanced by more than 1000") {
  const LogCapture log;
  ManualClock clock;
  GlobalStepWaiterHook hook(5000, {}, clock);
  hook.begin();
  StepBackend backend;
  set_step_on_sleep(clock, [&](std::int64_t step) { backend.step = step; },
                    {500, 1000, 1001, 2001, 2002, 5000});

  call_before_run(hook, backend);
  CHECK(hook.started());
  CHECK(clock.sleeps() == 6);
  CHECK(log.lines() ==
        std::vector<std::string>{
            "Waiting for global step 5000 before starting training.",
            "Waiting for global step 5000 before starting training. Current step is 1001.",
            "Waiting for global step 5000 before starting training. Current step is 2002.",
        });
}

TEST_CASE("D22 the poll interval is configurable") {
  ManualClock clock;
  GlobalStepWaiterHook hook(10, {.poll_interval_secs = 2.0}, clock);
  hook.begin();
  StepBackend backend;
  set_step_on_sleep(clock, [&](std::int64_t step) { backend.step = step; }, {3, 10});
  const LogCapture log;
  call_before_run(hook, backend);
  CHECK(clock.sleeps() == 2);
  CHECK(clock.now() == doctest::Approx(4.0));
}

TEST_CASE("K7 in a MonitoredSession the waiter blocks only the first run, even after recovery") {
  // x08: GlobalStepWaiterHook(2) sleeps twice before the first run; a later AbortedError makes a
  // new backend at step 0, and the waiter does not wait again (begin() is not called again).
  const LogCapture log;
  ManualClock clock;
  int created = 0;
  int runs = 0;
  struct AbortingBackend {
    int* runs;
    std::int64_t step = 0;
    void run() {
      if (++*runs == 3) throw runhooks::AbortedError("preempted");
      ++step;
    }
    std::int64_t global_step() const { return step; }
  };
  runhooks::MonitoredSession session(
      [&] {
        ++created;
        return AbortingBackend{&runs};
      },
      GlobalStepWaiterHook(2, {}, clock));
  set_step_on_sleep(clock, [&](std::int64_t step) { session.raw_session().step = step; }, {1, 2});

  std::vector<std::int64_t> steps;
  for (int i = 0; i < 4; ++i) {
    session.run();
    steps.push_back(session.raw_session().step);
  }
  session.close();
  CHECK(created == 2);
  CHECK(clock.sleeps() == 2);
  CHECK(steps == std::vector<std::int64_t>{3, 4, 1, 2});
  const std::vector<std::string> lines = log.lines();
  CHECK(std::count(lines.begin(), lines.end(),
                   "Waiting for global step 2 before starting training.") == 1);
}

TEST_CASE("K7 begin() re-arms the waiter, as TensorFlow's begin() does") {
  const LogCapture log;
  ManualClock clock;
  GlobalStepWaiterHook hook(5, {}, clock);
  StepBackend backend{.step = 5};
  hook.begin();
  call_before_run(hook, backend);
  CHECK(backend.reads == 1);
  call_before_run(hook, backend);
  CHECK(backend.reads == 1);
  hook.begin();
  CHECK_FALSE(hook.started());
  call_before_run(hook, backend);
  CHECK(backend.reads == 2);
}

TEST_CASE("beyond TensorFlow: a coordinator stop ends the wait with StopIteration") {
  const LogCapture log;
  ManualClock clock;
  runhooks::MonitoredSession session(StepBackend{}, GlobalStepWaiterHook(100, {}, clock));
  clock.on_sleep([&] {
    if (clock.sleeps() == 3) session.coordinator().request_stop();
  });
  CHECK_THROWS_AS(session.run(), runhooks::StopIteration);
  CHECK(clock.sleeps() == 3);
  CHECK_FALSE(session.hook<0>().started());
  CHECK(session.raw_session().step == 0);  // the step never ran
}

TEST_CASE("beyond TensorFlow: run_loop treats the interrupted wait as a clean end") {
  const LogCapture log;
  ManualClock clock;
  struct EndCounter {
    int* ends;
    void end(StepBackend&) { ++*ends; }
  };
  int ends = 0;
  runhooks::MonitoredSession session(StepBackend{}, GlobalStepWaiterHook(100, {}, clock),
                                     EndCounter{&ends});
  clock.on_sleep([&] { session.coordinator().request_stop(); });
  runhooks::run_loop(session);
  CHECK(session.closed());
  CHECK(ends == 1);
  CHECK(clock.sleeps() == 1);
  CHECK(session.raw_session().step == 0);
}

namespace {
// Asks to stop in its before_run, ahead of the waiter.
struct StopFirst {
  template <class Ctx>
  void before_run(Ctx& run_context) {
    run_context.request_stop();
  }
};
}  // namespace

TEST_CASE("beyond TensorFlow: a stop requested earlier in the same run ends the wait") {
  // TensorFlow keeps waiting here (K7: it ignores stop_requested).
  const LogCapture log;
  ManualClock clock;
  runhooks::MonitoredSession session(StepBackend{}, StopFirst{},
                                     GlobalStepWaiterHook(100, {}, clock));
  CHECK_THROWS_AS(session.run(), runhooks::StopIteration);
  CHECK(clock.sleeps() == 0);
}

TEST_CASE("beyond TensorFlow: a timeout ends the wait with DeadlineExceededError") {
  const LogCapture log;
  ManualClock clock;
  GlobalStepWaiterHook hook(100, {.poll_interval_secs = 0.5, .timeout_secs = 1.25}, clock);
  hook.begin();
  StepBackend backend{.step = 7};
  CHECK_THROWS_AS(call_before_run(hook, backend), runhooks::DeadlineExceededError);
  // Sleeps of 0.5, 0.5 and the remaining 0.25 s, then gives up.
  CHECK(clock.sleeps() == 3);
  CHECK(clock.now() == doctest::Approx(1.25));
  CHECK_FALSE(hook.started());

  GlobalStepWaiterHook again(100, {.timeout_secs = 2.0}, clock);
  again.begin();
  try {
    call_before_run(again, backend);
    FAIL("no exception");
  } catch (const runhooks::DeadlineExceededError& e) {
    const std::string what = e.what();
    CHECK(what.find("global step 100 not reached") != std::string::npos);
    CHECK(what.find("it is at 7") != std::string::npos);
  }
}

TEST_CASE("beyond TensorFlow: a reached step needs no timeout") {
  const LogCapture log;
  ManualClock clock;
  GlobalStepWaiterHook hook(100, {.timeout_secs = 0.0}, clock);
  hook.begin();
  StepBackend backend{.step = 100};
  call_before_run(hook, backend);
  CHECK(hook.started());
  CHECK(clock.sleeps() == 0);
}

namespace {

// A backend over a global step that other threads share, and can be waited on.
struct SharedBackend {
  runhooks::SharedGlobalStep* shared;

  void run() { shared->increment(); }
  std::int64_t global_step() const { return shared->load(); }
  std::int64_t wait_for_global_step(std::int64_t target, std::stop_token stop,
                                    std::chrono::steady_clock::time_point deadline) {
    return shared->wait_for_global_step(target, stop, deadline);
  }
};
static_assert(runhooks::WaitableGlobalStep<SharedBackend>);

std::atomic<bool>& waiting_logged() {
  static std::atomic<bool> logged{false};
  return logged;
}

}  // namespace

TEST_CASE("a WaitableGlobalStep backend wakes the waiter when another thread reaches the step") {
  // An hour between progress lines: a missed wake-up would hang the test, not pass it late.
  waiting_logged() = false;
  const runhooks::LogSink previous = runhooks::set_log_sink([](Severity, std::string_view line) {
    if (line.starts_with("Waiting for global step")) waiting_logged() = true;
  });

  runhooks::SharedGlobalStep shared;
  runhooks::MonitoredSession session(SharedBackend{&shared},
                                     GlobalStepWaiterHook(1000, {.poll_interval_secs = 3600.0}));
  std::thread worker([&] { session.run(); });
  std::thread chief([&] {
    while (!waiting_logged()) std::this_thread::yield();  // the worker is about to wait
    for (int i = 0; i < 1000; ++i) shared.increment();
  });
  chief.join();
  worker.join();
  runhooks::set_log_sink(previous);

  CHECK(session.hook<0>().started());
  CHECK(shared.load() == 1001);  // 1000 by the chief, then the worker's own first step
  session.close();
}

TEST_CASE("a WaitableGlobalStep wait ends at once when the coordinator stops") {
  const LogCapture log;
  runhooks::SharedGlobalStep shared;
  runhooks::MonitoredSession session(SharedBackend{&shared},
                                     GlobalStepWaiterHook(1000, {.poll_interval_secs = 3600.0}));
  std::thread worker([&] { CHECK_THROWS_AS(session.run(), runhooks::StopIteration); });
  std::thread stopper([&] {
    while (log.lines().empty()) std::this_thread::yield();
    session.coordinator().request_stop();
  });
  stopper.join();
  worker.join();
  CHECK_FALSE(session.hook<0>().started());
  CHECK(shared.load() == 0);
}

TEST_CASE("SharedGlobalStep: wait returns the value, at a target, a stop or a deadline") {
  runhooks::SharedGlobalStep shared(5);
  const auto far = std::chrono::steady_clock::now() + std::chrono::hours(1);
  CHECK(shared.wait_for_global_step(5, {}, far) == 5);  // already there
  CHECK(shared.wait_for_global_step(9, {}, std::chrono::steady_clock::now()) == 5);  // deadline
  std::stop_source stopped;
  stopped.request_stop();
  CHECK(shared.wait_for_global_step(9, stopped.get_token(), far) == 5);
  CHECK(shared.increment(3) == 8);
  shared.store(20);
  CHECK(shared.load() == 20);
}

TEST_CASE("defect 5: GlobalStepWaiterOptions are validated, naming the option and the value") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {0.0, -0.5, nan, inf, 1e300}) {
    INFO(bad);
    CHECK_THROWS_AS(GlobalStepWaiterHook<ManualClock>(10, {.poll_interval_secs = bad}),
                    std::invalid_argument);
  }
  for (double bad : {-0.5, nan, inf, 1e300}) {
    INFO(bad);
    CHECK_THROWS_AS(GlobalStepWaiterHook<ManualClock>(10, {.timeout_secs = bad}),
                    std::invalid_argument);
  }
  CHECK_THROWS_WITH_AS(GlobalStepWaiterHook<ManualClock>(10, {.poll_interval_secs = nan}),
                       "runhooks: GlobalStepWaiterOptions::poll_interval_secs must be a number of "
                       "seconds greater than 0 and at most 1e+09, got nan.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(GlobalStepWaiterHook<ManualClock>(10, {.timeout_secs = -1}),
                       "runhooks: GlobalStepWaiterOptions::timeout_secs must be a number of "
                       "seconds at least 0 and at most 1e+09, got -1.",
                       std::invalid_argument);
  // A zero timeout is a valid "do not wait at all".
  StepBackend backend;
  GlobalStepWaiterHook<ManualClock> hook(10, {.timeout_secs = 0.0});
  CHECK_THROWS_AS(call_before_run(hook, backend), runhooks::DeadlineExceededError);
  // Constant options are checked at compile time (tests/compile_fail/waiter_options_constexpr.cpp).
  static_assert((runhooks::GlobalStepWaiterOptions{.poll_interval_secs = 0.25}.validate(), true));
}

TEST_CASE("GlobalStepWaiterHook: wait_until_step() and options() are the settings as given") {
  const GlobalStepWaiterHook<ManualClock> hook(1200, {.poll_interval_secs = 0.25, .timeout_secs = 30.0});
  CHECK(hook.wait_until_step() == 1200);
  CHECK(hook.options().poll_interval_secs == 0.25);
  CHECK(hook.options().timeout_secs == 30.0);
  const GlobalStepWaiterHook defaults(5);
  CHECK(defaults.options().poll_interval_secs == 0.5);  // TensorFlow's
  CHECK(!defaults.options().timeout_secs.has_value());
}
