// File outputs on I/O failure: CsvOutput and EventFileWriter (and SummaryOutput, which uses it)
// follow one rule. A file that cannot be opened throws std::system_error naming the path; the
// first failure to write, flush or close logs one warning with the path and the cause, later
// records are dropped, and error() tells what happened. Disk full is /dev/full; a file size
// limit is RLIMIT_FSIZE in a forked child with SIGXFSZ ignored (tests run as root, so
// permissions cannot make a write fail).

#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/manual_clock.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/csv_output.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using runhooks::CsvOutput;
using runhooks::EventFileWriter;
using runhooks::Severity;

namespace {

class TempDir {
 public:
  TempDir() {
    std::random_device entropy;
    path_ = fs::temp_directory_path() / ("runhooks-outputs-io-" + std::to_string(entropy()));
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::vector<std::string>& captured_warnings() {
  static std::vector<std::string> lines;
  return lines;
}

// Captures runhooks' warnings for the life of the object; info lines are dropped.
class WarningCapture {
 public:
  WarningCapture()
      : previous_(runhooks::set_log_sink([](Severity severity, std::string_view line) {
          if (severity == Severity::warning) captured_warnings().emplace_back(line);
        })) {
    captured_warnings().clear();
  }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  ~WarningCapture() { runhooks::set_log_sink(previous_); }

  [[nodiscard]] const std::vector<std::string>& lines() const { return captured_warnings(); }

 private:
  runhooks::LogSink previous_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// What a child run under a file size limit saw: its warnings and the output's error().
struct ChildReport {
  std::vector<std::string> warnings;
  int error = 0;
  std::string failure;  // an exception that escaped, or how the child ended
};

// Runs `body` in a forked child whose files cannot grow past `limit` bytes. SIGXFSZ is ignored
// there, so a write past the limit fails with EFBIG instead of killing the process. `body`
// returns the error() it ends with; its warnings are captured and reported back through a pipe.
template <class Body>
ChildReport with_file_size_limit(rlim_t limit, Body body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);  // nothing buffered may be written twice
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string report;
    int status = 0;
    try {
      std::signal(SIGXFSZ, SIG_IGN);
      const rlimit rl{limit, limit};
      if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) throw std::runtime_error("setrlimit failed");
      const WarningCapture warnings;
      const std::error_code error = body();
      report += "error " + std::to_string(error.value()) + "\n";
      for (const std::string& line : warnings.lines()) report += "warning " + line + "\n";
    } catch (const std::exception& e) {
      report += std::string("failure exception: ") + e.what() + "\n";
      status = 1;
    }
    const char* data = report.data();
    std::size_t left = report.size();
    while (left > 0) {
      const ssize_t n = ::write(fds[1], data, left);
      if (n <= 0) break;
      data += n;
      left -= static_cast<std::size_t>(n);
    }
    ::_exit(status);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) {
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);

  ChildReport result;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("error ", 0) == 0) result.error = std::stoi(line.substr(6));
    if (line.rfind("warning ", 0) == 0) result.warnings.push_back(line.substr(8));
    if (line.rfind("failure ", 0) == 0) result.failure = line.substr(8);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    result.failure += " (child ended with status " + std::to_string(status) + ")";
  }
  return result;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string file_too_large = std::generic_category().message(EFBIG);

// StepCounterHook's test backend: each run moves the clock, then the global step.
struct CounterBackend {
  runhooks::ManualClock clock;
  std::int64_t step = 0;
  void run() {
    clock.advance(0.01);
    ++step;
  }
  std::int64_t global_step() const { return step; }
};

EventFileWriter::WallClock fixed_clock() {
  return [] { return std::chrono::system_clock::time_point{std::chrono::milliseconds{1700000000000}}; };
}

// A backend with a scalar for SummarySaverHook.
struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};
struct LossBackend {
  runhooks::ManualClock clock;
  std::int64_t step = 0;
  void run() {
    clock.advance(0.01);
    ++step;
  }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 0.5f; }
};

}  // namespace

TEST_CASE("CsvOutput on /dev/full constructs, then reports the first row once") {
  const WarningCapture warnings;
  CsvOutput out("/dev/full");  // not a regular file: no header, so nothing is written yet
  CHECK(!out.error());
  out.record("global_step/sec", 100.0, 11);
  CHECK(out.error() == std::errc::no_space_on_device);
  REQUIRE(warnings.lines().size() == 1);
  CHECK(contains(warnings.lines()[0], "runhooks::CsvOutput: cannot write /dev/full: "));
  CHECK(contains(warnings.lines()[0], std::generic_category().message(ENOSPC)));
  out.record("global_step/sec", 100.0, 21);
  CsvOutput copy = out;  // copies share the file and its error
  copy.record("global_step/sec", 100.0, 31);
  CHECK(copy.error() == std::errc::no_space_on_device);
  CHECK(warnings.lines().size() == 1);
}

TEST_CASE("CsvOutput that cannot open its file throws, naming the path") {
  const TempDir dir;
  CHECK_THROWS_WITH_AS(CsvOutput(dir.path()), doctest::Contains(dir.path().string().c_str()),
                       std::system_error);
  CHECK_THROWS_WITH_AS(CsvOutput(dir.path() / "missing" / "rate.csv"),
                       doctest::Contains((dir.path() / "missing" / "rate.csv").string().c_str()),
                       std::system_error);
}

TEST_CASE("CsvOutput under a file size limit mid-run reports once, keeping the rows before") {
  const TempDir dir;
  const fs::path csv = dir.path() / "rate.csv";
  // Header (30 bytes) and three rows (23 each) fit in 100 bytes; the fourth row does not.
  const ChildReport report = with_file_size_limit(100, [&] {
    runhooks::ManualClock clock;
    runhooks::MonitoredSession session(
        CounterBackend{.clock = clock},
        runhooks::StepCounterHook({.every_n_steps = 10}, clock, CsvOutput(csv)));
    for (int i = 0; i < 100; ++i) session.run();  // nine rows
    const std::error_code error = session.hook<0>().output().error();
    session.close();
    return error;
  });
  INFO(report.failure);
  CHECK(report.failure.empty());
  CHECK(report.error == EFBIG);
  REQUIRE(report.warnings.size() == 1);
  CHECK(contains(report.warnings[0], "runhooks::CsvOutput: cannot write " + csv.string() + ": " +
                                         file_too_large + "; later rows are dropped."));
  const std::string expected =
      "global_step,tag,steps_per_sec\n11,global_step/sec,100\n21,global_step/sec,100\n"
      "31,global_step/sec,100\n4";
  CHECK(read_bytes(csv) == expected);
}

TEST_CASE("CsvOutput never cuts or splits a row, whatever the tag") {
  const TempDir dir;
  const fs::path csv = dir.path() / "rate.csv";
  const std::string long_tag(1000, 't');
  {
    CsvOutput out(csv);
    out.record(long_tag, 1.5, 1);
    out.record("a,b \"c\"", 2.0, 2);
    CHECK(!out.error());
  }
  CHECK(read_bytes(csv) == "global_step,tag,steps_per_sec\n1," + long_tag +
                               ",1.5\n2,\"a,b \"\"c\"\"\",2\n");
}

TEST_CASE("EventFileWriter under a file size limit mid-run reports once; the file is an exact prefix") {
  const TempDir dir;
  const auto write_events = [](EventFileWriter& writer) {
    for (int step = 1; step <= 20; ++step) {
      writer.add_scalar("global_step/sec", 100.0F, step * 10);
      writer.flush();
    }
  };
  std::string whole;
  {
    EventFileWriter writer(dir.path() / "whole", fixed_clock());
    write_events(writer);
    writer.close();
    REQUIRE(!writer.error());
    whole = read_bytes(writer.path());
  }
  constexpr rlim_t limit = 300;
  REQUIRE(whole.size() > limit);

  const ChildReport report = with_file_size_limit(limit, [&] {
    EventFileWriter writer(dir.path() / "limited", fixed_clock());
    write_events(writer);  // neither throws nor logs again after the first failure
    writer.close();
    writer.close();
    return writer.error();
  });
  const fs::path path = fs::directory_iterator(dir.path() / "limited")->path();
  INFO(report.failure);
  CHECK(report.failure.empty());
  CHECK(report.error == EFBIG);
  REQUIRE(report.warnings.size() == 1);
  CHECK(contains(report.warnings[0], "runhooks::EventFileWriter: cannot write " + path.string() +
                                         ": " + file_too_large + "; later events are dropped."));

  // The records before the failure are whole; the file ends inside the next one.
  const std::string bytes = read_bytes(path);
  CHECK(bytes == whole.substr(0, limit));
  std::size_t complete = 0;
  while (complete + 12 <= bytes.size()) {
    const std::size_t next = complete + 16 + static_cast<std::uint8_t>(bytes[complete]);
    if (next > bytes.size()) break;
    complete = next;
  }
  REQUIRE(complete > 0);
  REQUIRE(complete < bytes.size());
  try {
    runhooks::read_event_file(path);
    FAIL("a cut record was read");
  } catch (const runhooks::EventFileError& error) {
    CHECK(error.offset() == complete);
    CHECK(contains(error.what(), "truncated"));
  }
  CHECK(runhooks::parse_events(std::string_view(bytes).substr(0, complete)).size() >= 2);
}

TEST_CASE("EventFileWriter that cannot write its first record still constructs, and reports it") {
  const TempDir dir;
  const ChildReport report = with_file_size_limit(0, [&] {
    EventFileWriter writer(dir.path(), fixed_clock());
    writer.add_scalar("global_step/sec", 1.0F, 1);
    writer.flush();
    return writer.error();
  });
  INFO(report.failure);
  CHECK(report.failure.empty());
  CHECK(report.error == EFBIG);
  REQUIRE(report.warnings.size() == 1);
  CHECK(contains(report.warnings[0], "runhooks::EventFileWriter: cannot write " + dir.path().string()));
}

TEST_CASE("EventFileWriter reports a failure at close, and at destruction, once") {
  const TempDir dir;
  // The first record is flushed by the constructor (52 bytes); the rest stay in the stdio
  // buffer until close, which is where the limit is met.
  const ChildReport at_close = with_file_size_limit(60, [&] {
    EventFileWriter writer(dir.path() / "close", fixed_clock());
    for (int step = 1; step <= 5; ++step) writer.add_scalar("global_step/sec", 1.0F, step);
    if (writer.error()) throw std::runtime_error("failed before close");
    writer.close();
    return writer.error();
  });
  INFO(at_close.failure);
  CHECK(at_close.failure.empty());
  CHECK(at_close.error == EFBIG);
  REQUIRE(at_close.warnings.size() == 1);
  CHECK(contains(at_close.warnings[0], "runhooks::EventFileWriter: cannot close "));

  const ChildReport at_destruction = with_file_size_limit(60, [&] {
    {
      EventFileWriter writer(dir.path() / "destructor", fixed_clock());
      for (int step = 1; step <= 5; ++step) writer.add_scalar("global_step/sec", 1.0F, step);
    }
    return std::error_code{};
  });
  INFO(at_destruction.failure);
  CHECK(at_destruction.failure.empty());
  REQUIRE(at_destruction.warnings.size() == 1);
  CHECK(contains(at_destruction.warnings[0], "runhooks::EventFileWriter: cannot close "));
  CHECK(contains(at_destruction.warnings[0], file_too_large));
}

TEST_CASE("hooks sharing a directory's event file under a file size limit: one warning, every holder's error()") {
  // StepCounterHook's SummaryOutput and SummarySaverHook write one file (EventFileWriterCache):
  // one failure, one warning, and both outputs report it.
  const TempDir dir;
  const ChildReport report = with_file_size_limit(600, [&] {
    runhooks::ManualClock clock;
    runhooks::MonitoredSession session(
        LossBackend{.clock = clock},
        runhooks::StepCounterHook({.every_n_steps = 10}, runhooks::SummaryOutput(dir.path(), false),
                                  clock),
        runhooks::SummarySaverHook{{.save_steps = 5}, dir.path(), runhooks::scalars<Loss>});
    for (int i = 0; i < 200; ++i) session.run();  // about 60 records of about 40 bytes
    session.close();  // SummarySaverHook's end() writes the records waiting
    const std::error_code counter = session.hook<0>().output().error();
    const std::error_code saver = session.hook<1>().writer().writer()->error();
    return counter == saver ? counter : std::make_error_code(std::errc::invalid_argument);
  });
  INFO(report.failure);
  CHECK(report.failure.empty());
  CHECK(report.error == EFBIG);
  REQUIRE(report.warnings.size() == 1);
  CHECK(contains(report.warnings[0], "runhooks::EventFileWriter: cannot write " + dir.path().string()));
}

TEST_CASE("SummaryOutput in a session: a file size limit is reported once, and error() tells") {
  const TempDir dir;
  const ChildReport report = with_file_size_limit(200, [&] {
    runhooks::ManualClock clock;
    runhooks::MonitoredSession session(
        CounterBackend{.clock = clock},
        runhooks::StepCounterHook({.every_n_steps = 10}, runhooks::SummaryOutput(dir.path(), false),
                                  clock));
    for (int i = 0; i < 200; ++i) session.run();  // nineteen scalars, about 40 bytes each
    session.hook<0>().output().flush();  // they wait in memory for flush_secs otherwise
    const std::error_code error = session.hook<0>().output().error();
    session.close();
    return error;
  });
  INFO(report.failure);
  CHECK(report.failure.empty());
  CHECK(report.error == EFBIG);
  REQUIRE(report.warnings.size() == 1);
  CHECK(contains(report.warnings[0], "runhooks::EventFileWriter: cannot write " + dir.path().string()));
}

namespace {
// The thread that logged the last warning, and the sink to pass it on to.
std::thread::id warning_thread;
runhooks::LogSink next_sink = nullptr;
void note_thread_sink(Severity severity, std::string_view line) {
  if (severity == Severity::warning) warning_thread = std::this_thread::get_id();
  next_sink(severity, line);
}
}  // namespace

TEST_CASE("EventFileWriter: a failure of the background write is logged once, and error() tells the adding thread") {
  // Nothing but the background thread writes here (no flush(), less than 64 KiB): the adding
  // thread learns of the failure from error() alone, and drops its later records.
  const TempDir dir;
  const auto write_events = [](EventFileWriter& writer, int first, int last) {
    for (int step = first; step <= last; ++step) writer.add_scalar("global_step/sec", 100.0F, step * 10);
  };
  std::string whole;
  {
    EventFileWriter writer(dir.path() / "whole", {.flush_secs = 0}, fixed_clock());
    write_events(writer, 1, 20);
    writer.close();
    REQUIRE(!writer.error());
    whole = read_bytes(writer.path());
  }
  constexpr rlim_t limit = 300;
  REQUIRE(whole.size() > limit);

  const ChildReport report = with_file_size_limit(limit, [&] {
    EventFileWriter writer(dir.path() / "limited", {.flush_secs = 0.05}, fixed_clock());
    next_sink = runhooks::set_log_sink(note_thread_sink);
    write_events(writer, 1, 20);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!writer.error() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!writer.error()) throw std::runtime_error("no failure within 20 s");
    write_events(writer, 21, 40);  // dropped, and not logged again
    writer.flush();
    writer.close();  // joins the background thread: its log line is out
    runhooks::set_log_sink(next_sink);
    if (warning_thread == std::this_thread::get_id())
      throw std::runtime_error("the failure was logged by the adding thread");
    return writer.error();
  });
  const fs::path path = fs::directory_iterator(dir.path() / "limited")->path();
  INFO(report.failure);
  CHECK(report.failure.empty());
  CHECK(report.error == EFBIG);
  REQUIRE(report.warnings.size() == 1);
  CHECK(contains(report.warnings[0], "runhooks::EventFileWriter: cannot write " + path.string() +
                                         ": " + file_too_large + "; later events are dropped."));
  CHECK(read_bytes(path) == whole.substr(0, limit));
}
