// SignalStopHook: the first signal stops the loop at the next step boundary and every end() runs
// (the checkpoint hook's final save included); a second one restores the previous handler and
// re-raises; the previous handlers are back once the session ends, however it ends. The
// end-to-end case with a real process and SIGTERM from outside is
// tests/checkpoint/checkpoint_faults.cpp. A signal during creation or recovery ends it at once
// (issue 17, item 4): the cases below, and tests/session/recovery_signal.cpp with a real process.
#include <doctest/doctest.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <stdexcept>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/monitored_session.hpp>

#include <support/checkpoint_backends.hpp>
#include <support/stop_during_recovery.hpp>

using runhooks::SignalStopHook;

namespace {

// Raises `signal` from inside the step numbered `at` (1-based), as if it came from outside then.
struct RaisingBackend {
  std::int64_t step = 0;
  std::vector<std::int64_t> raise_at;
  int signal = SIGTERM;
  void run() {
    ++step;
    for (const std::int64_t at : raise_at)
      if (step == at) ::raise(signal);
  }
  std::int64_t global_step() const { return step; }
};

struct EndCounter {
  int* ends;
  template <class B>
  void end(B&) {
    ++*ends;
  }
};

// The handler installed for `signal`, as a number (doctest installs its own for SIGINT and
// SIGTERM, so "the previous handler" is whatever was there before the session).
using Handler = std::uintptr_t;
Handler current_handler(int signal) {
  struct sigaction action {};
  ::sigaction(signal, nullptr, &action);
  return reinterpret_cast<Handler>(action.sa_handler);
}
void custom_handler(int);
const Handler ours = reinterpret_cast<Handler>(&runhooks::detail::signal_stop_handler);
const Handler custom = reinterpret_cast<Handler>(&custom_handler);

int custom_calls = 0;
void custom_handler(int) { ++custom_calls; }

}  // namespace

TEST_CASE("signal stop: the first signal ends the loop after that step; every end() runs") {
  ckpt::CapturedLog log;
  int ends = 0;
  const Handler before_term = current_handler(SIGTERM), before_int = current_handler(SIGINT);
  REQUIRE(before_term != ours);
  {
    runhooks::MonitoredSession session{RaisingBackend{.raise_at = {5}}, SignalStopHook{},
                                       EndCounter{&ends}, EndCounter{&ends}};
    CHECK(current_handler(SIGTERM) == ours);
    runhooks::run_loop(session);
    CHECK(session.raw_session().step == 5);
    CHECK(SignalStopHook::received_signal() == SIGTERM);
  }
  CHECK(ends == 2);
  CHECK(log.contains("SIGTERM received: stopping after this step; send it again to terminate at once."));
  CHECK(current_handler(SIGTERM) == before_term);
  CHECK(current_handler(SIGINT) == before_int);
}

TEST_CASE("signal stop: with a checkpoint hook, the final checkpoint is the last completed step") {
  ckpt::CapturedLog log;
  ckpt::TempDir dir;
  struct Backend : ckpt::CheckpointedBackend {
    void run() {
      fakes::FakeBackend::run();
      if (step == 7) ::raise(SIGINT);
    }
  };
  {
    runhooks::MonitoredSession session{
        [] { return Backend{}; },  // built in place: GCC 12 warns, wrongly, about moving its map
        SignalStopHook{},
        runhooks::CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 5})};
    while (!session.should_stop()) session.run();
  }
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-0", "model.ckpt-5", "model.ckpt-7"});
}

TEST_CASE("signal stop: a second signal goes to the previous handler") {
  ckpt::CapturedLog log;
  struct sigaction mine {};
  mine.sa_handler = &custom_handler;
  sigemptyset(&mine.sa_mask);
  struct sigaction saved {};
  REQUIRE(::sigaction(SIGUSR1, &mine, &saved) == 0);
  custom_calls = 0;
  {
    runhooks::MonitoredSession session{RaisingBackend{.raise_at = {3, 4}, .signal = SIGUSR1},
                                       SignalStopHook({.signals = {SIGUSR1}})};
    CHECK(current_handler(SIGUSR1) == ours);
    session.run();
    session.run();
    session.run();  // the first signal: a stop after this step
    CHECK(session.should_stop());
    CHECK(custom_calls == 0);
    session.raw_session().run();  // the second, outside the session: our handler hands it on
    CHECK(custom_calls == 1);
    CHECK(current_handler(SIGUSR1) == custom);  // and left the previous one in place
  }
  CHECK(current_handler(SIGUSR1) == custom);
  ::sigaction(SIGUSR1, &saved, nullptr);
}

TEST_CASE("signal stop: a second SIGTERM terminates the process (default action)") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGTERM, SIG_DFL);  // not doctest's crash reporter
    runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});
    runhooks::MonitoredSession session{RaisingBackend{.raise_at = {2, 3}}, SignalStopHook{}};
    session.run();
    session.run();  // first SIGTERM: stop requested
    session.raw_session().run();  // second: terminates here
    ::_exit(3);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}

TEST_CASE("signal stop: the previous handlers are back when the session ends by an exception") {
  struct Failing {
    std::int64_t step = 0;
    void run() { throw std::runtime_error("boom"); }
  };
  const Handler before_term = current_handler(SIGTERM), before_int = current_handler(SIGINT);
  try {
    runhooks::MonitoredSession session{Failing{}, SignalStopHook{}};
    CHECK(current_handler(SIGINT) == ours);
    session.run();
  } catch (const std::runtime_error&) {
  }
  CHECK(current_handler(SIGINT) == before_int);
  CHECK(current_handler(SIGTERM) == before_term);
}

TEST_CASE("signal stop: sessions alive together share one handler; the last one puts it back") {
  ckpt::CapturedLog log;
  const Handler before_term = current_handler(SIGTERM);
  auto first = std::make_unique<runhooks::MonitoredSession<RaisingBackend, SignalStopHook>>(
      RaisingBackend{.raise_at = {2}}, SignalStopHook{});
  {
    runhooks::MonitoredSession second{RaisingBackend{}, SignalStopHook{}};
    first->run();
    first->run();  // SIGTERM: both sessions see it
    CHECK(first->should_stop());
    second.run();
    CHECK(second.should_stop());
    CHECK(current_handler(SIGTERM) == ours);
  }
  CHECK(current_handler(SIGTERM) == ours);  // `first` still holds it
  first.reset();
  CHECK(current_handler(SIGTERM) == before_term);
  // A new session starts with the flag cleared.
  runhooks::MonitoredSession third{RaisingBackend{}, SignalStopHook{}};
  third.run();
  CHECK_FALSE(third.should_stop());
}

TEST_CASE("signal stop: signals a handler cannot catch are refused") {
  CHECK_THROWS_WITH_AS(SignalStopHook({.signals = {SIGINT, SIGKILL}}),
                       "runhooks: SignalStopOptions::signals holds 9, which is not a signal a "
                       "handler can catch.",
                       std::invalid_argument);
  CHECK_THROWS_AS(SignalStopHook({.signals = {0}}), std::invalid_argument);
  CHECK_THROWS_AS(SignalStopHook({.signals = {SIGSTOP}}), std::invalid_argument);
}

TEST_CASE("signal stop: SIGTERM on another thread wakes the first creation's back-off; the session stops without a backend") {
  stops::WatchedLog log;
  const Handler before_term = current_handler(SIGTERM);
  int calls = 0;
  {
    // raise() delivers to the calling thread: the session's thread sleeps on, unless woken.
    std::thread signaller([&] {
      log.wait_for("runhooks: backend lost; re-creating it (attempt 1,");
      ::raise(SIGTERM);
    });
    stops::HangGuard guard("the constructor stayed in its back-off after SIGTERM");
    runhooks::MonitoredSession session{
        runhooks::SessionCreator{stops::FailingFactory{&calls}, stops::ForeverEvery11Days{}},
        SignalStopHook{}};
    guard.release();
    signaller.join();
    CHECK(session.should_stop());
    CHECK(calls == 1);
    CHECK(SignalStopHook::received_signal() == SIGTERM);
    CHECK(log.count("stopped during recovery") == 1);
    CHECK(log.count("runhooks: stopped during recovery (SIGTERM received): the backend is not "
                    "created again after 1 failure, and the session stops without one. Last "
                    "error: the backend's host is down") == 1);
    runhooks::run_loop(session);  // no step; closes cleanly
    CHECK(session.closed());
  }
  CHECK(current_handler(SIGTERM) == before_term);
}

TEST_CASE("signal stop: SIGINT on another thread ends run()'s endless retries (RetryForever, no back-off)") {
  stops::WatchedLog log;
  int calls = 0;
  int ends = 0;
  runhooks::MonitoredSession session{stops::FailingFactory{&calls, 1}, SignalStopHook{},
                                     EndCounter{&ends}};
  std::thread signaller([&] {
    log.wait_for("(attempt 3, after 0 s)");
    ::raise(SIGINT);
  });
  stops::HangGuard guard("run() kept re-creating the backend after SIGINT");
  session.run();
  guard.release();
  signaller.join();
  CHECK(session.should_stop());
  CHECK(calls >= 3);
  CHECK(log.count("stopped during recovery") == 1);
  CHECK(log.count("runhooks: stopped during recovery (SIGINT received): the backend is not created "
                  "again after ") == 1);
  CHECK_NOTHROW(session.close());
  CHECK(ends == 0);  // no backend to end
}

TEST_CASE("signal stop: options() are the options as given, and move along") {
  const SignalStopHook defaults;
  CHECK(defaults.options().signals == std::vector<int>{SIGINT, SIGTERM});
  SignalStopHook hook({.signals = {SIGUSR1, SIGHUP}});
  CHECK(hook.options().signals == std::vector<int>{SIGUSR1, SIGHUP});
  const SignalStopHook moved(std::move(hook));
  CHECK(moved.options().signals == std::vector<int>{SIGUSR1, SIGHUP});
}
