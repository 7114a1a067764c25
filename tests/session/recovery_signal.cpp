// A stop always wins over recovery, with a real process and a real signal (issue 17, item 4):
// tests/session/recovery_signal_helper keeps failing to create its backend (RetryForever, or
// retrying forever after a one-hour back-off) under SignalStopHook. Sent SIGTERM once it is
// recovering, it must exit cleanly (status 0, one "stopped during recovery" line) within 2 s of
// the signal, well inside a scheduler's grace period (Kubernetes and Slurm: 30 s) before its
// SIGKILL.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <support/child_process.hpp>


namespace {

using Clock = std::chrono::steady_clock;

std::string helper_path() {
  const char* path = std::getenv("RUNHOOKS_RECOVERY_SIGNAL_HELPER");
  REQUIRE_MESSAGE(path != nullptr,
                  "RUNHOOKS_RECOVERY_SIGNAL_HELPER must name tests/session/recovery_signal_helper");
  return path;
}

using support::Child;

void check_sigterm_ends_recovery(std::vector<std::string> args) {
  Child child(std::move(args));
  REQUIRE_MESSAGE(child.read_until("recovering", std::chrono::seconds(20)),
                  "the helper never said it was recovering; it wrote:\n" << child.output());
  const Clock::time_point sent = Clock::now();
  child.kill(SIGTERM);
  // 10 s before giving up on it, so that a hang is told from a slow exit; the bound is 2 s.
  const int status = child.wait_for(std::chrono::seconds(10));
  const double secs = std::chrono::duration<double>(Clock::now() - sent).count();
  INFO("the helper wrote:\n" << child.output());
  REQUIRE_MESSAGE(status != -1, "still running 10 s after SIGTERM");
  CHECK_MESSAGE(secs < 2.0, "exited " << secs << " s after SIGTERM");
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(child.count_containing("stopped during recovery") == 1);
  CHECK(child.count_containing("runhooks: stopped during recovery (SIGTERM received): the backend "
                               "is not created again after ") == 1);
  CHECK(child.said("should_stop true"));
  CHECK(child.said("closed"));
  CHECK(child.lines().back() == "exit");
}

}  // namespace

TEST_CASE("SIGTERM during endless recovery (RetryForever): a clean exit within 2 s") {
  check_sigterm_ends_recovery({helper_path()});
}

TEST_CASE("SIGTERM during a one-hour back-off: a clean exit within 2 s") {
  check_sigterm_ends_recovery({helper_path(), "--backoff", "3600"});
}
