// The process that tests/session/recovery_signal.cpp starts and sends SIGTERM: a MonitoredSession
// whose backend can never be created (every creation throws UnavailableError), with
// SignalStopHook.
//
//   recovery_signal_helper [--backoff SECS]
//
// Default policy RetryForever (re-create at once, forever); --backoff SECS retries forever,
// waiting SECS before each attempt. Writes to stdout, each line in one write(2): "recovering"
// once the first re-creation is logged, the session's "runhooks: stopped during recovery ..."
// line, "should_stop true|false" once the constructor returned, "closed" after run_loop, and
// "exit". Exit status 0 after a clean stop; 2 for bad usage; 3 with "error: WHAT" for an
// exception.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include <unistd.h>

#include <runhooks/error.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/session_creator.hpp>

namespace {

void say(std::string_view line) {
  const std::string text = std::string(line) + "\n";
  [[maybe_unused]] const ::ssize_t written = ::write(STDOUT_FILENO, text.data(), text.size());
}

// Only the lines the test reads: the endless "re-creating" lines would flood the pipe.
void sink(runhooks::Severity, std::string_view line) {
  static bool said_recovering = false;
  if (line.find("runhooks: backend lost; re-creating it") != std::string_view::npos) {
    if (!said_recovering) say("recovering");
    said_recovering = true;
  } else {
    say(line);
  }
}

struct Backend {
  void run() {}
};

Backend unreachable() { throw runhooks::UnavailableError("helper: the backend's host is down"); }

struct ForeverAfter {
  double secs;
  std::optional<double> next_delay(int) const { return secs; }
};

template <class Source>
int train(Source source) {
  runhooks::MonitoredSession session{std::move(source), runhooks::SignalStopHook{}};
  say(std::string("should_stop ") + (session.should_stop() ? "true" : "false"));
  runhooks::run_loop(session);
  say("closed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  runhooks::set_log_sink(&sink);
  try {
    int status = 0;
    if (argc == 1) {
      status = train(&unreachable);  // a plain callable: RetryForever
    } else if (argc == 3 && std::string_view(argv[1]) == "--backoff") {
      status = train(runhooks::SessionCreator{&unreachable, ForeverAfter{std::atof(argv[2])}});
    } else {
      std::fprintf(stderr, "usage: %s [--backoff SECS]\n", argv[0]);
      return 2;
    }
    say("exit");
    return status;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 3;
  }
}
