// The on_exception hook point (concepts.hpp, session/exception_dispatch.hpp): which exceptions
// reach it, declaration order without short-circuit, a handler that throws, and
// ExceptionCheckpointHook: the backend's state at the exception beside the regular checkpoints,
// with the state file untouched and the original exception reaching the caller.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/saver/exception_checkpoint_hook.hpp>
#include <runhooks/coordinator.hpp>
#include <runhooks/error.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <exception>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/checkpoint_backends.hpp"
#include "support/fakes.hpp"

namespace {

// Records "<name>:<message>" for each on_exception; `fail` makes its handler throw.
struct ExceptionRecorder {
  std::vector<std::string>* seen;
  std::string name;
  bool fail = false;
  template <class Backend>
  void on_exception(Backend& backend, const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      seen->push_back(name + ":" + e.what() + "@" + std::to_string(backend.global_step()));
    }
    if (fail) throw std::logic_error("handler " + name + " failed");
  }
};

}  // namespace

TEST_CASE("on_exception: every hook sees the escaping exception in declaration order; a throwing handler hides nothing") {
  fakes::LogCapture capture;
  std::vector<std::string> seen;
  fakes::FakeBackend backend;
  backend.throw_at(3, std::runtime_error("boom"));
  runhooks::MonitoredSession session{std::move(backend), ExceptionRecorder{&seen, "a"},
                                     ExceptionRecorder{&seen, "b", true},
                                     ExceptionRecorder{&seen, "c"}};
  session.run();
  session.run();
  CHECK(seen.empty());
  CHECK_THROWS_WITH_AS(session.run(), "boom", std::runtime_error);
  CHECK(seen == std::vector<std::string>{"a:boom@2", "b:boom@2", "c:boom@2"});
  CHECK(capture.contains("::on_exception threw while handling 'boom': handler b failed; the "
                         "original exception propagates."));
}

TEST_CASE("on_exception: not for what the session recovers from, nor the clean ends; a singular session's AbortedError and should_stop() error are") {
  std::vector<std::string> seen;
  {
    fakes::FakeBackend backend;
    backend.throw_at(2, runhooks::AbortedError("preempted"));
    backend.throw_at(3, runhooks::OutOfRangeError("end of input"));
    runhooks::MonitoredSession session{[backend]() mutable { return std::exchange(backend, {}); },
                                       ExceptionRecorder{&seen, "a"}};
    session.run();
    session.run();  // recovered: a fresh backend ran the step
    CHECK(seen.empty());
  }
  {
    fakes::FakeBackend backend;
    backend.throw_at(1, runhooks::OutOfRangeError("end of input"));
    runhooks::MonitoredSession session{std::move(backend), ExceptionRecorder{&seen, "a"}};
    runhooks::run_loop(session);  // a clean end
    CHECK(seen.empty());
  }
  {
    fakes::FakeBackend backend;
    backend.throw_at(2, runhooks::AbortedError("preempted"));
    runhooks::SingularMonitoredSession session{std::move(backend), ExceptionRecorder{&seen, "a"}};
    session.run();
    CHECK_THROWS_AS(runhooks::run_loop(session), runhooks::AbortedError);
    CHECK(seen == std::vector<std::string>{"a:preempted@1"});
  }
  {  // a coordinator thread's error, rethrown by a singular session's should_stop()
    seen.clear();
    runhooks::SingularMonitoredSession session{fakes::FakeBackend{}, ExceptionRecorder{&seen, "a"}};
    session.run();
    session.coordinator().request_stop(std::make_exception_ptr(std::runtime_error("thread failed")));
    CHECK_THROWS_WITH_AS(session.should_stop(), "thread failed", std::runtime_error);
    CHECK(seen == std::vector<std::string>{"a:thread failed@1"});
  }
  {  // run_step_fn too
    seen.clear();
    runhooks::MonitoredSession session{fakes::FakeBackend{}, ExceptionRecorder{&seen, "a"}};
    CHECK_THROWS_WITH_AS(session.run_step_fn([](auto&) { throw std::invalid_argument("bad"); }),
                         "bad", std::invalid_argument);
    CHECK(seen == std::vector<std::string>{"a:bad@0"});
  }
}

TEST_CASE("ExceptionCheckpointHook: the state at the exception is saved aside; the state file still names the last regular checkpoint") {
  fakes::LogCapture capture;
  ckpt::TempDir dir;
  ckpt::CheckpointedBackend backend;
  backend.throw_at(6, std::runtime_error("CUDA error: an illegal memory access"));
  runhooks::MonitoredSession session{
      std::move(backend),
      runhooks::CheckpointSaverHook({.checkpoint_dir = dir.str(), .save_steps = 2}),
      runhooks::ExceptionCheckpointHook({.checkpoint_dir = dir.str()})};
  // The original exception's type and message reach the caller through run_loop.
  CHECK_THROWS_WITH_AS(runhooks::run_loop(session), "CUDA error: an illegal memory access",
                       std::runtime_error);
  CHECK(ckpt::step_in(dir / "on_exception") == 5);
  CHECK(runhooks::latest_checkpoint(dir.path) == dir / "model.ckpt-4");
  CHECK(ckpt::named_checkpoints(dir.path) ==
        std::vector<std::string>{"model.ckpt-0", "model.ckpt-2", "model.ckpt-4"});
  CHECK(session.hook<1>().saved() == dir / "on_exception");
  CHECK(capture.contains("runhooks: an exception was raised with message: CUDA error: an illegal "
                         "memory access; saved the backend's state to '" +
                         (dir / "on_exception").string() + "'"));
  for (const std::string& file : ckpt::files_in(dir.path))
    CHECK(file.find(".tmp-") == std::string::npos);

  // It restores, by hand.
  ckpt::CheckpointedBackend restored;
  restored.restore(dir / "on_exception");
  CHECK(restored.step == 5);
}

TEST_CASE("ExceptionCheckpointHook: its own failure is logged and the original exception propagates; a second exception overwrites the first") {
  fakes::LogCapture capture;
  ckpt::TempDir dir;
  ckpt::CheckpointedBackend backend;
  backend.throw_at(2, std::runtime_error("first"));
  backend.throw_at(4, std::runtime_error("second"));
  backend.throw_at(5, std::runtime_error("third"));
  runhooks::MonitoredSession session{std::move(backend),
                                     runhooks::ExceptionCheckpointHook({.checkpoint_dir = dir.str()})};
  session.run();
  CHECK_THROWS_WITH(session.run(), "first");
  CHECK(ckpt::step_in(dir / "on_exception") == 1);
  session.run();
  CHECK_THROWS_WITH(session.run(), "second");
  CHECK(ckpt::step_in(dir / "on_exception") == 2);
  session.raw_session().save_error = "No space left on device";
  CHECK_THROWS_WITH_AS(session.run(), "third", std::runtime_error);
  CHECK(session.hook<0>().failures() == 1);
  CHECK(capture.contains("runhooks: an exception was raised with message: third; "
                         "ExceptionCheckpointHook could not save the backend's state: No space "
                         "left on device"));
  CHECK(ckpt::step_in(dir / "on_exception") == 2);  // the previous one, intact
  CHECK(ckpt::files_in(dir.path) == std::vector<std::string>{"on_exception.arrays"});
  CHECK_FALSE(std::filesystem::exists(dir / "checkpoint"));
}

TEST_CASE("ExceptionCheckpointHook: a file size limit (RLIMIT_FSIZE, a real EFBIG) during its save: logged, the previous one intact, nothing left, the original exception propagates") {
  ckpt::TempDir dir;
  {  // a first exception checkpoint, at step 1
    ckpt::CheckpointedBackend backend;
    backend.throw_at(2, std::runtime_error("first"));
    runhooks::MonitoredSession session{std::move(backend),
                                       runhooks::ExceptionCheckpointHook({.checkpoint_dir = dir.str()})};
    session.run();
    CHECK_THROWS_WITH(session.run(), "first");
  }
  const auto before = ckpt::read_text(dir / "on_exception.arrays");
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: every file write past 16 bytes fails with EFBIG (SIGXFSZ ignored).
    int code = 0;
    try {
      std::signal(SIGXFSZ, SIG_IGN);
      const rlimit limit{16, 16};
      if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(10);
      static std::string logged;
      runhooks::set_log_sink([](runhooks::Severity, std::string_view line) { logged += line; });
      ckpt::CheckpointedBackend backend;
      backend.throw_at(3, std::runtime_error("second"));
      runhooks::MonitoredSession session{std::move(backend),
                                         runhooks::ExceptionCheckpointHook({.checkpoint_dir = dir.str()})};
      session.run();
      session.run();
      try {
        session.run();
        code = 11;  // no exception
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) != "second") code = 12;
      }
      if (code == 0 && session.hook<0>().failures() != 1) code = 13;
      // The cause is the kernel's: the backend's write of its file failed with EFBIG.
      if (code == 0 && (logged.find("message: second; ExceptionCheckpointHook could not save the "
                                    "backend's state") == std::string::npos ||
                        logged.find("File too large") == std::string::npos))
        code = 15;
    } catch (...) {
      code = 14;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(ckpt::read_text(dir / "on_exception.arrays") == before);  // still step 1's
  CHECK(ckpt::step_in(dir / "on_exception") == 1);
  CHECK(ckpt::files_in(dir.path) == std::vector<std::string>{"on_exception.arrays"});
}

TEST_CASE("ExceptionCheckpointOptions: checked, naming option and value") {
  using runhooks::ExceptionCheckpointHook;
  using runhooks::ExceptionCheckpointOptions;
  CHECK_THROWS_WITH_AS(ExceptionCheckpointHook(ExceptionCheckpointOptions{}),
                       "runhooks: ExceptionCheckpointOptions::checkpoint_dir must name a "
                       "directory, got ''.",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ExceptionCheckpointHook(ExceptionCheckpointOptions{.checkpoint_dir = "d", .name = "model.ckpt-5"}),
      "runhooks: ExceptionCheckpointOptions::name must not end in '-<digits>', the name of a "
      "regular checkpoint, got 'model.ckpt-5'.",
      std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ExceptionCheckpointHook(ExceptionCheckpointOptions{.checkpoint_dir = "d", .name = "a/b"}),
      "runhooks: ExceptionCheckpointOptions::name must be a file name without '/', not starting "
      "with '.' and not 'checkpoint', got 'a/b'.",
      std::invalid_argument);
  CHECK_THROWS_AS(ExceptionCheckpointHook(ExceptionCheckpointOptions{.checkpoint_dir = "d",
                                                                     .name = "checkpoint"}),
                  std::invalid_argument);
}
