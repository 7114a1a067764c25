// ProfilerHook: TensorFlow's ProfilerHookTest (case J91 of tf-semantics.md §3) with its numbers
// (timeline files counted after each run), and the Chrome trace itself checked by
// tools/check_trace.py: well-formed JSON, the required fields, durations >= 0, every span inside
// the step's event and none overlapping another.

#include <runhooks/hooks/profiler_hook.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/fakes.hpp"
#include "support/hook_test_support.hpp"

using runhooks::ManualClock;
using runhooks::ProfilerHook;
namespace fs = std::filesystem;

namespace {

struct Loss : runhooks::Key<float> {};

// TensorFlow's train_op = assign_add(global_step, 1).
struct Backend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 0.5f; }
};

// Hooks with per-step callbacks around the profiler, so that the trace has their spans.
struct Before {
  auto before_run(auto&) { return runhooks::SessionRunArgs{runhooks::fetch<Loss>()}; }
};
struct After {
  void after_run(auto&, const auto&) {}
};

int count_timelines(const fs::path& dir) {
  int n = 0;
  if (!fs::exists(dir)) return 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("timeline-", 0) == 0 && name.size() > 14 && name.substr(name.size() - 5) == ".json")
      ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("J91 test_raise_in_both_secs_and_steps / test_raise_in_none_secs_and_steps") {
  CHECK_THROWS_WITH_AS((ProfilerHook{{.save_steps = 20, .save_secs = 10}}),
                       doctest::Contains("Can not provide both every_secs and every_steps"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((ProfilerHook{{}}),
                       doctest::Contains("Either every_secs or every_steps should be provided"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((runhooks::ProfilerOptions{.save_steps = -2}.validate()),
                       "runhooks: ProfilerOptions::save_steps must be at least 1, got -2.",
                       std::invalid_argument);
}

TEST_CASE("J91 test_save_secs_does_not_save_in_first_step / test_save_steps_...") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  {
    runhooks::SingularMonitoredSession session{Backend{},
                                               ProfilerHook{{.save_secs = 2}, dir.path() / "a"}};
    session.run();
    CHECK(count_timelines(dir.path() / "a") == 0);
  }
  {
    runhooks::SingularMonitoredSession session{Backend{},
                                               ProfilerHook{{.save_steps = 1}, dir.path() / "b"}};
    session.run();
    CHECK(count_timelines(dir.path() / "b") == 0);
  }
}

TEST_CASE("J91 test_save_secs_saves_periodically: T none, T+2.5 one, T+2.6 and T+4.4 none, T+4.5 two") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  ManualClock clock(1484695987.209386);
  runhooks::SingularMonitoredSession session{Backend{},
                                             ProfilerHook{{.save_secs = 2}, dir.path(), clock}};
  session.run();
  CHECK(count_timelines(dir.path()) == 0);
  clock.set(1484695987.209386 + 2.5);
  session.run();
  CHECK(count_timelines(dir.path()) == 1);
  clock.set(1484695987.209386 + 2.6);
  session.run();
  clock.set(1484695987.209386 + 4.4);
  session.run();
  CHECK(count_timelines(dir.path()) == 1);
  clock.set(1484695987.209386 + 4.5);
  session.run();
  CHECK(count_timelines(dir.path()) == 2);
}

TEST_CASE("J91 test_save_steps_saves_periodically: 0, 1, 1, 2, 2 files after runs 1-5") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  runhooks::SingularMonitoredSession session{Backend{},
                                             ProfilerHook{{.save_steps = 2}, dir.path()}};
  CHECK(count_timelines(dir.path()) == 0);
  std::vector<int> counts;
  for (int i = 0; i < 5; ++i) {
    session.run();
    counts.push_back(count_timelines(dir.path()));
  }
  CHECK(counts == std::vector<int>{0, 1, 1, 2, 2});
  CHECK(fs::exists(dir.path() / "timeline-2.json"));
  CHECK(fs::exists(dir.path() / "timeline-4.json"));
  CHECK(capture.contains("Saving timeline for 2 into '" + (dir.path() / "timeline-2.json").string() + "'."));
}

TEST_CASE("J91 test_run_metadata_saves: save_steps=1, 2 runs: the trace of step 2") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  ProfilerHook hook{{.save_steps = 1}, dir.path()};
  runhooks::SingularMonitoredSession session{Backend{}, std::ref(hook)};
  session.run();
  session.run();
  REQUIRE(hook.written().size() == 1);
  CHECK(hook.written()[0] == dir.path() / "timeline-2.json");
}

TEST_CASE("ProfilerHook writes a Chrome trace that chrome://tracing and Perfetto load") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  {
    runhooks::SingularMonitoredSession session{
        Backend{}, Before{}, ProfilerHook{{.save_steps = 3}, dir.path()}, After{}};
    for (int i = 0; i < 4; ++i) session.run();  // profiles step 3; run 4 completes its trace
  }
  const fs::path trace = dir.path() / "timeline-3.json";
  REQUIRE(fs::exists(trace));
  const std::string json = hook_test::read_file(trace);
  // Every callback of the step, the later hook's after_run included (written once the step ended).
  CHECK(json.find("\"name\": \"step 3\"") != std::string::npos);
  CHECK(json.find("::before_run\"") != std::string::npos);
  CHECK(json.find("Backend::run\"") != std::string::npos);
  CHECK(json.find("Backend::fetch\"") != std::string::npos);
  CHECK(json.find("After::after_run\"") != std::string::npos);
  // This hook's own after_run (GCC names it ProfilerHook<runhooks::SteadyClock>, Clang
  // ProfilerHook<>).
  CHECK(json.find("ProfilerHook<") != std::string::npos);
  CHECK(json.find(">::after_run\"") != std::string::npos);

  const auto script = hook_test::tool("check_trace.py");
  if (!script) {
    MESSAGE("skipped: set RUNHOOKS_SOURCE_DIR to the source tree to run tools/check_trace.py");
    return;
  }
  const auto run = hook_test::run_python(
      *script,
      hook_test::shell_quote(trace.string()) + " --step 3 --span Backend::run --span Backend::fetch"
          " --span Before::before_run --span After::after_run",
      dir.path());
  INFO("output: ", run.out, run.err);
  CHECK(run.status == 0);
  CHECK(run.out == "ok 5\n");
}

TEST_CASE("ProfilerHook: a profiled run that fails leaves no trace") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  struct FailsAt2 : Backend {
    void run() {
      if (step == 1) {
        step = 100;  // a failure that does not come back
        throw std::runtime_error("step failed");
      }
      ++step;
    }
  };
  ProfilerHook hook{{.save_steps = 1}, dir.path()};
  {
    runhooks::SingularMonitoredSession session{FailsAt2{}, std::ref(hook)};
    session.run();
    CHECK_THROWS_AS(session.run(), std::runtime_error);  // the profiled run
  }
  CHECK(count_timelines(dir.path()) == 0);
  CHECK(hook.written().empty());
}

TEST_CASE("ProfilerHook: the trace file of a run is complete once the next run starts") {
  fakes::LogCapture capture;
  const hook_test::TempDir dir;
  runhooks::SingularMonitoredSession session{
      Backend{}, ProfilerHook{{.save_steps = 2}, dir.path()}, After{}};
  session.run();
  session.run();  // profiled: written before After's after_run span exists
  const fs::path trace = dir.path() / "timeline-2.json";
  REQUIRE(fs::exists(trace));
  CHECK(hook_test::read_file(trace).find("After::after_run") == std::string::npos);
  session.run();  // written again, complete
  CHECK(hook_test::read_file(trace).find("After::after_run") != std::string::npos);
}
