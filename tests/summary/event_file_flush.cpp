// When EventFileWriter's records reach the file (issue 21): a record is encoded in memory on the
// calling thread and written by a background thread within flush_secs, without further records;
// sooner when 64 KiB wait; at flush(), close() and destruction; at once with flush_secs = 0. A
// process killed loses at most its last flush_secs of records, and the file it leaves reads back.
// The bytes are those of a write per record. Timing tests poll with a deadline, never a fixed
// sleep, so a loaded machine makes them slower, not flaky.

#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>

#include <doctest/doctest.h>
#include <support/hook_test_support.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using runhooks::EventFileWriter;
using runhooks::EventFileWriterCache;
using runhooks::EventFileWriterOptions;
using Clock = std::chrono::steady_clock;

namespace {

// A fresh directory per test, removed afterwards, so tests can run in parallel and leave nothing.
struct TempDir : hook_test::TempDir {
  TempDir() : hook_test::TempDir("runhooks-event-flush-") {}
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The whole records at the start of `bytes`: a file being written, or left by a killed process,
// may end inside one (TensorBoard reads that as the end of the file).
std::vector<runhooks::Event> whole_events(std::string_view bytes) {
  std::size_t complete = 0;
  while (complete + 12 <= bytes.size()) {
    std::uint64_t length = 0;
    for (int i = 0; i < 8; ++i)
      length |= std::uint64_t{static_cast<std::uint8_t>(bytes[complete + static_cast<std::size_t>(i)])} << (8 * i);
    if (complete + 16 + length > bytes.size()) break;
    complete += 16 + static_cast<std::size_t>(length);
  }
  return runhooks::parse_events(bytes.substr(0, complete));
}

std::size_t events_in(const fs::path& file) { return whole_events(read_bytes(file)).size(); }

// Polls `done` every millisecond until it holds or `limit` passes; how long it took, or nothing.
template <class Done>
std::optional<double> seconds_until(Done done, double limit = 20.0) {
  const Clock::time_point start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
  while (!done()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

EventFileWriter::WallClock fixed_clock() {
  return [] { return std::chrono::system_clock::time_point{std::chrono::milliseconds{1700000000000}}; };
}

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};
// +1 global step per run; the loss is half the step.
struct LossBackend {
  std::int64_t step = 0;
  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  float fetch(Loss) const { return 0.5F * static_cast<float>(step); }
};

}  // namespace

TEST_CASE("EventFileWriterOptions: flush_secs defaults to 2 s, is at least 0, and is checked") {
  CHECK(EventFileWriterOptions{}.flush_secs == 2.0);
  CHECK_NOTHROW(EventFileWriterOptions{.flush_secs = 0}.validate());
  CHECK_THROWS_WITH_AS(EventFileWriterOptions{.flush_secs = -1}.validate(),
                       "runhooks: EventFileWriterOptions::flush_secs must be a number of seconds "
                       "at least 0 and at most 1e+09, got -1.",
                       std::invalid_argument);
  CHECK_THROWS_AS(EventFileWriterOptions{.flush_secs = std::nan("")}.validate(), std::invalid_argument);
  CHECK_THROWS_AS(EventFileWriterOptions{.flush_secs = 2e9}.validate(), std::invalid_argument);
  static_assert(EventFileWriterOptions{.flush_secs = 0.5}.validate().flush_secs == 0.5);

  const TempDir dir;
  CHECK_THROWS_AS(EventFileWriter(dir.path() / "w", {.flush_secs = -1}), std::invalid_argument);
  CHECK_FALSE(fs::exists(dir.path() / "w"));  // checked before anything is made
  CHECK_THROWS_AS(EventFileWriterCache::get(dir.path() / "c", EventFileWriterOptions{.flush_secs = -1}),
                  std::invalid_argument);
  CHECK_THROWS_AS(runhooks::SummaryOutput(dir.path() / "s", false, EventFileWriterOptions{.flush_secs = -1}),
                  std::invalid_argument);
  CHECK_THROWS_AS(runhooks::EventFileSummaryWriter(dir.path() / "h", EventFileWriterOptions{.flush_secs = -1}),
                  std::invalid_argument);
}

TEST_CASE("records wait in memory, and reach the file by flush(), close() or destruction") {
  const TempDir dir;
  fs::path file;
  {
    EventFileWriter writer(dir.path() / "a", {.flush_secs = 1e9}, fixed_clock());
    file = writer.path();
    CHECK(writer.flush_secs() == 1e9);
    CHECK(events_in(file) == 1);  // the file-version record is written at once
    writer.add_scalar("loss", 1.0F, 1);
    writer.add_session_start(1);
    writer.add_checkpoint(1, "/ckpt/model.ckpt");
    CHECK(events_in(file) == 1);  // no write system call for them
    writer.flush();
    CHECK(events_in(file) == 4);
    writer.add_scalar("loss", 2.0F, 2);
    writer.close();
    CHECK(events_in(file) == 5);
  }
  {
    EventFileWriter writer(dir.path() / "b", {.flush_secs = 1e9}, fixed_clock());
    file = writer.path();
    for (int step = 1; step <= 10; ++step) writer.add_scalar("loss", 0.5F, step);
    CHECK(events_in(file) == 1);
  }
  CHECK(events_in(file) == 11);
}

TEST_CASE("flush_secs = 0: each record is in the file when the call returns, with no thread") {
  const TempDir dir;
  EventFileWriter writer(dir.path(), {.flush_secs = 0}, fixed_clock());
  for (int step = 1; step <= 5; ++step) {
    writer.add_scalar("loss", 0.5F, step);
    CHECK(events_in(writer.path()) == static_cast<std::size_t>(1 + step));
  }
}

TEST_CASE("a record reaches the file within flush_secs with no further record, flush() or close()") {
  const TempDir dir;
  constexpr double flush_secs = 0.05;
  EventFileWriter writer(dir.path(), {.flush_secs = flush_secs});
  for (int round = 1; round <= 3; ++round) {
    CAPTURE(round);
    const Clock::time_point added = Clock::now();
    writer.add_scalar("loss", 0.5F, round);
    const auto took = seconds_until([&] { return events_in(writer.path()) == static_cast<std::size_t>(1 + round); });
    REQUIRE(took.has_value());
    // Informational: a loaded machine delays the thread, so only the deadline above is asserted.
    MESSAGE("record " << round << " reached the file after "
                      << std::chrono::duration<double>(Clock::now() - added).count() << " s (flush_secs "
                      << flush_secs << ")");
  }
  CHECK(!writer.error());
}

TEST_CASE("64 KiB waiting wake the background thread before flush_secs") {
  const TempDir dir;
  EventFileWriter writer(dir.path(), {.flush_secs = 1e9}, fixed_clock());
  const std::string tag(1000, 't');
  // The first `count` records reach flush_bytes: the last one wakes the thread, which writes all.
  const std::size_t size =
      runhooks::detail::frame_record(runhooks::detail::encode_scalar_event(1700000000.0, 1, tag, 1.0F)).size();
  const std::size_t count = (EventFileWriter::flush_bytes + size - 1) / size;
  for (std::size_t step = 1; step <= count; ++step) writer.add_scalar(tag, 1.0F, 1);
  REQUIRE(seconds_until([&] { return events_in(writer.path()) == 1 + count; }));
}

TEST_CASE("the file's bytes are those of a write per record") {
  const TempDir dir;
  const auto write = [](EventFileWriter& writer) {
    writer.add_session_start(1);
    for (int step = 1; step <= 300; ++step) {
      writer.add_scalar(step % 2 == 0 ? "loss" : "a much longer tag, of sixty characters, to use two bytes ...",
                        0.25F * static_cast<float>(step), step);
      if (step % 100 == 0) writer.add_checkpoint(step, "/ckpt/model.ckpt");
      if (step == 150) writer.flush();
    }
    writer.close();
    return read_bytes(writer.path());
  };
  EventFileWriter each(dir.path() / "each", {.flush_secs = 0}, fixed_clock());
  EventFileWriter buffered(dir.path() / "buffered", {}, fixed_clock());
  const std::string expected = write(each);
  CHECK(write(buffered) == expected);
  CHECK(runhooks::read_event_file(buffered.path()).size() == 1 + 1 + 300 + 3);
}

TEST_CASE("a moved writer's background thread moves along") {
  const TempDir dir;
  EventFileWriter first(dir.path(), {.flush_secs = 0.05});
  first.add_scalar("loss", 1.0F, 1);
  EventFileWriter moved = std::move(first);
  moved.add_scalar("loss", 2.0F, 2);
  REQUIRE(seconds_until([&] { return events_in(moved.path()) == 3; }));
  CHECK(first.path().empty());
  CHECK(!first.error());
  CHECK_THROWS_AS(first.add_scalar("loss", 3.0F, 3), std::system_error);
  first.close();  // nothing to close
}

TEST_CASE("EventFileWriterCache: a later get() may shorten the flush period, never lengthen it") {
  const TempDir dir;
  const auto writer = EventFileWriterCache::get(dir.path(), EventFileWriterOptions{.flush_secs = 10});
  CHECK(writer->flush_secs() == 10);
  CHECK(EventFileWriterCache::get(dir.path())->flush_secs() == 10);  // no options: as it is
  CHECK(EventFileWriterCache::get(dir.path(), EventFileWriterOptions{.flush_secs = 30})->flush_secs() == 10);
  runhooks::SummaryOutput output(dir.path(), false, EventFileWriterOptions{.flush_secs = 0.05});
  (void)output.writer();  // the output takes the directory's writer here (or at open())
  CHECK(writer->flush_secs() == 0.05);
  output.record("global_step/sec", 100.0, 1);  // the thread woke to the new period
  REQUIRE(seconds_until([&] { return events_in(writer->path()) == 2; }));
  // Down to 0: the thread ends, and each record is written at once.
  CHECK(EventFileWriterCache::get(dir.path(), EventFileWriterOptions{.flush_secs = 0})->flush_secs() == 0);
  output.record("global_step/sec", 100.0, 2);
  CHECK(events_in(writer->path()) == 3);
  // A writer made without options has the default.
  CHECK(EventFileWriterCache::get(dir.path() / "other")->flush_secs() == EventFileWriterOptions{}.flush_secs);
}

TEST_CASE("several threads add while the background thread writes: every record whole, in order per thread") {
  const TempDir dir;
  constexpr int threads = 3;
  constexpr int per_thread = 4000;
  EventFileWriter writer(dir.path(), {.flush_secs = 0.001});
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([t, &writer] {
      const std::string tag = "thread-" + std::to_string(t);
      for (int i = 1; i <= per_thread; ++i) {
        if (i % 1000 == 0) writer.add_checkpoint(i, tag);  // as CheckpointSaverHook's saver thread
        else writer.add_scalar(tag, static_cast<float>(i), i);
        if (i % 1500 == 0) writer.flush();
        if (i % 700 == 0) static_cast<void>(writer.error());
      }
    });
  for (auto& worker : workers) worker.join();
  writer.close();
  const std::vector<runhooks::Event> events = runhooks::read_event_file(writer.path());
  REQUIRE(events.size() == 1 + threads * per_thread);
  std::vector<std::int64_t> last(threads, 0);
  for (std::size_t i = 1; i < events.size(); ++i) {
    const runhooks::Event& e = events[i];
    const std::string& tag = e.session_log ? e.session_log->checkpoint_path : e.summary.at(0).tag;
    const int t = tag.back() - '0';
    CHECK(e.step == last[static_cast<std::size_t>(t)] + 1);
    last[static_cast<std::size_t>(t)] = e.step;
  }
}

TEST_CASE("a process killed loses at most its last flush_secs of summaries; the file reads back") {
  // The child runs a session whose SummarySaverHook writes every step, waits (polling its own
  // file, with a deadline) until the background flush has written the first 20 summaries
  // without any further call, runs 5 more steps and SIGKILLs itself at once. The parent reads
  // what it left: every summary older than flush_secs, and a prefix of the rest.
  const TempDir dir;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 3;
    try {
      runhooks::MonitoredSession session(
          LossBackend{}, runhooks::SummarySaverHook{
                         {.save_steps = 1},
                         runhooks::EventFileSummaryWriter(dir.path(), EventFileWriterOptions{.flush_secs = 0.05}),
                         runhooks::scalars<Loss>});
      for (int i = 0; i < 20; ++i) session.run();
      const fs::path file = session.hook<0>().writer().writer()->path();
      // The file-version record, START, 20 summaries.
      if (seconds_until([&] { return events_in(file) == 22; })) {
        for (int i = 0; i < 5; ++i) session.run();
        ::raise(SIGKILL);
      }
      code = 2;  // the deadline passed
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE_MESSAGE(WIFSIGNALED(status), "the child exited with " << WEXITSTATUS(status)
                                                                 << " (2: its records never reached the file)");
  CHECK(WTERMSIG(status) == SIGKILL);

  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir.path())) files.push_back(entry.path());
  REQUIRE(files.size() == 1);
  const std::vector<runhooks::Event> events = whole_events(read_bytes(files[0]));
  REQUIRE(events.size() >= 22);
  REQUIRE(events.size() <= 27);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[1].session_log.has_value());
  for (std::size_t i = 2; i < events.size(); ++i) {
    CHECK(events[i].step == static_cast<std::int64_t>(i - 1));
    REQUIRE(events[i].summary.size() == 1);
    CHECK(events[i].summary[0].simple_value == 0.5F * static_cast<float>(i - 1));
  }
  MESSAGE("the kill lost " << 27 - events.size() << " of the 5 summaries of its last flush period");
}
