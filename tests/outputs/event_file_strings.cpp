// Every string runhooks writes into an event file is UTF-8, whatever the input (issue 29, item 4):
// protobuf's parsers refuse an event holding a `string` field that is not, and TensorBoard's reader
// then raises on that record and shows nothing after it. The strings are the summary tags
// (StepCounterHook's, SummarySaverHook's keys, EventFileWriter::add_scalar's, SummaryEncoder's)
// and the checkpoint path of a SessionLog CHECKPOINT; the file version and the writer's name are
// constants, and runhooks writes no run, plugin or text names. Checked with TensorBoard's own
// reader (tools/read_summaries.py) where the tensorboard package is installed.

#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/hooks/step_counter_hook.hpp>
#include <runhooks/hooks/summary_saver_hook.hpp>
#include <runhooks/monitored_session.hpp>
#include <runhooks/outputs/summary_output.hpp>
#include <runhooks/summary/detail/utf8.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>
#include <runhooks/summary/histogram.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/checkpoint_backends.hpp"
#include "support/hook_test_support.hpp"
#include "support/run_directory.hpp"

namespace fs = std::filesystem;
using runhooks::EventFileWriter;
using Status = runhooks::SessionLog::Status;

namespace {

struct Loss : runhooks::Key<float> {
  static constexpr std::string_view name = "loss";
};

// A Latin-1 "café": the byte 0xe9 alone is not UTF-8.
const std::string latin1_cafe = "caf\xe9";

}  // namespace

TEST_CASE("escape_invalid_utf8 is Python's decode('utf-8', 'backslashreplace'); is_utf8 is protobuf's check") {
  using runhooks::detail::escape_invalid_utf8;
  using runhooks::detail::is_utf8;
  // Expected values printed by Python 3.11 (bytes.decode("utf-8", "backslashreplace")).
  const std::vector<std::pair<std::string, std::string>> cases{
      {"caf\xe9", "caf\\xe9"},
      {"\xc0\x80", "\\xc0\\x80"},                  // overlong NUL
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},         // a surrogate, U+D800
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // above U+10FFFF
      {"\xe2\x82", "\\xe2\\x82"},                  // cut short
      {"\xe2\x82" "A", "\\xe2\\x82" "A"},
      {"\x80", "\\x80"},
      {"\xf5", "\\xf5"},
      {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},  // U+1F600, valid
      {"\xe2\x82\xac", "\xe2\x82\xac"},          // U+20AC
      {"\xef\xbf\xbf", "\xef\xbf\xbf"},          // U+FFFF
      {std::string("a\0b", 3), std::string("a\0b", 3)},
      {"a\\b", "a\\b"},
  };
  for (const auto& pair : cases) {
    const std::string& raw = pair.first;  // not a structured binding: CAPTURE's lambda takes it,
    const std::string& escaped = pair.second;  // which clang 14 refuses for a binding
    CAPTURE(escaped);
    CHECK(escape_invalid_utf8(raw) == escaped);
    CHECK(is_utf8(raw) == (raw == escaped));
    CHECK(is_utf8(escape_invalid_utf8(raw)));
  }
  static_assert(runhooks::detail::is_utf8("global_step/sec"));
  static_assert(!runhooks::detail::is_utf8("caf\xe9"));
}

TEST_CASE("a checkpoint directory whose name is not UTF-8: TensorBoard reads every event, the path escaped") {
  // The fault: CheckpointSaverHook's SessionLog held the raw byte; TensorBoard's reader raised on
  // it ("String field had bad UTF-8") and showed none of the summaries after it.
  const ckpt::CapturedLog quiet;  // the saves' log lines
  const hook_test::TempDir dir;
  const fs::path checkpoint_dir = dir.path() / latin1_cafe;
  const std::string escaped_path = (dir.path() / "caf\\xe9" / "model.ckpt").string();
  {
    struct Model : ckpt::CheckpointedBackend {
      float fetch(Loss) const { return 0.5f * static_cast<float>(step); }
    };
    runhooks::MonitoredSession session(
        Model{},
        runhooks::CheckpointSaverHook({.checkpoint_dir = checkpoint_dir.string(), .save_steps = 2}),
        runhooks::SummarySaverHook{{.save_steps = 1}, checkpoint_dir, runhooks::scalars<Loss>});
    for (int i = 0; i < 5; ++i) session.run();
    session.close();
  }
  // The checkpoints themselves are in the directory of that name.
  CHECK(fs::exists(checkpoint_dir / "model.ckpt-4.arrays"));

  const run_directory::Events written = run_directory::read_events(checkpoint_dir);
  const std::vector<std::pair<std::int64_t, std::string>> expected{
      {0, escaped_path}, {2, escaped_path}, {4, escaped_path}, {5, escaped_path}};
  CHECK(written.session_logs(Status::checkpoint) == expected);
  CHECK(written.steps_of("loss") == std::vector<std::int64_t>{1, 2, 3, 4, 5});

  // TensorBoard's file layer cannot open a path that is not UTF-8 itself (its gfile encodes
  // names as UTF-8: `tensorboard --logdir .` inside the directory works), so it reads a copy.
  REQUIRE(written.files.size() == 1);
  const fs::path copy = dir.path() / "copy";
  fs::create_directories(copy);
  fs::copy_file(written.files[0], copy / written.files[0].filename());
  auto seen = run_directory::read_with_tensorboard(copy, dir.path());
  if (!seen) return;
  std::vector<std::string> checkpoints;
  for (const std::string& line : seen->session_logs)
    if (line.find("\tCHECKPOINT\t") != std::string::npos) checkpoints.push_back(line);
  CHECK(checkpoints == std::vector<std::string>{"0\tCHECKPOINT\t" + escaped_path,
                                                "2\tCHECKPOINT\t" + escaped_path,
                                                "4\tCHECKPOINT\t" + escaped_path,
                                                "5\tCHECKPOINT\t" + escaped_path});
  CHECK(run_directory::steps(seen->scalars["loss"]) == std::vector<std::int64_t>{1, 2, 3, 4, 5});
}

TEST_CASE("random checkpoint paths: TensorBoard reads each as Python's backslashreplace decodes its bytes") {
  const hook_test::TempDir dir;
  std::mt19937 random(29);
  // Bytes biased towards the ranges where UTF-8 goes wrong; no tab or line break (the reader's
  // output is one line per event, fields split by tabs).
  const auto random_byte = [&]() -> char {
    for (;;) {
      const auto b = static_cast<unsigned char>(std::uniform_int_distribution<int>(0, 3)(random) == 0
                                                    ? std::uniform_int_distribution<int>(0x20, 0x7e)(random)
                                                    : std::uniform_int_distribution<int>(0x80, 0xff)(random));
      if (b != '\t' && b != '\n' && b != '\r') return static_cast<char>(b);
    }
  };
  std::vector<std::string> paths;
  for (int i = 0; i < 400; ++i) {
    std::string path(static_cast<std::size_t>(std::uniform_int_distribution<int>(1, 12)(random)), ' ');
    for (char& c : path) c = random_byte();
    paths.push_back(std::move(path));
  }
  fs::path file;
  {
    EventFileWriter writer(dir.path() / "run");
    for (std::size_t i = 0; i < paths.size(); ++i)
      writer.add_checkpoint(static_cast<std::int64_t>(i + 1), paths[i]);
    file = writer.path();
  }
  // Our reader gets the escaped form, always UTF-8.
  std::size_t i = 0;
  for (const runhooks::Event& event : runhooks::read_event_file(file)) {
    if (!event.session_log) continue;
    REQUIRE(i < paths.size());
    CHECK(event.session_log->checkpoint_path == runhooks::detail::escape_invalid_utf8(paths[i]));
    CHECK(runhooks::detail::is_utf8(event.session_log->checkpoint_path));
    ++i;
  }
  CHECK(i == paths.size());

  // TensorBoard reads every record, and each path is Python's decoding of the raw bytes.
  auto seen = run_directory::read_with_tensorboard(file, dir.path());
  if (!seen) return;
  {
    std::ofstream raw(dir.path() / "raw.hex");
    for (const std::string& path : paths) {
      for (const char c : path) {
        constexpr char digits[] = "0123456789abcdef";
        raw << digits[static_cast<unsigned char>(c) >> 4] << digits[static_cast<unsigned char>(c) & 15];
      }
      raw << '\n';
    }
    std::ofstream script(dir.path() / "decode.py");
    script << "import sys\n"
              "for line in open(sys.argv[1]):\n"
              "    sys.stdout.buffer.write(bytes.fromhex(line.strip()).decode('utf-8', 'backslashreplace')"
              ".encode('utf-8') + b'\\n')\n";
  }
  const auto python = hook_test::run_python(dir.path() / "decode.py",
                                            hook_test::shell_quote((dir.path() / "raw.hex").string()),
                                            dir.path());
  REQUIRE(python.status == 0);
  std::vector<std::string> expected;
  std::istringstream lines(python.out);
  std::int64_t step = 1;
  for (std::string line; std::getline(lines, line);)
    expected.push_back(std::to_string(step++) + "\tCHECKPOINT\t" + line);
  CHECK(seen->records == static_cast<int>(paths.size()) + 1);
  CHECK(seen->session_logs == expected);
}

TEST_CASE("a summary tag that is not UTF-8 is refused, naming it; the file stays readable") {
  const hook_test::TempDir dir;
  fs::path file;
  {
    EventFileWriter writer(dir.path() / "run");
    writer.add_scalar("loss", 1.0F, 1);
    CHECK_THROWS_WITH_AS(writer.add_scalar(latin1_cafe, 2.0F, 2),
                         "runhooks: EventFileWriter::add_scalar: the summary tag 'caf\\xe9' is not "
                         "UTF-8 (byte 0xe9 at offset 3): TensorBoard cannot read an event holding "
                         "it; name it in UTF-8.",
                         std::invalid_argument);
    runhooks::SummaryEncoder encoder;
    CHECK_THROWS_WITH_AS(encoder.add_scalar("a\xc0\x80", 1.0F),
                         doctest::Contains("SummaryEncoder::add_scalar: the summary tag 'a\\xc0\\x80' "
                                           "is not UTF-8 (byte 0xc0 at offset 1)"),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(encoder.add_histogram(latin1_cafe, runhooks::Histogram{}),
                         doctest::Contains("SummaryEncoder::add_histogram: the summary tag 'caf\\xe9'"),
                         std::invalid_argument);
    CHECK(encoder.summary().empty());  // nothing was added
    writer.add_scalar("loss", 3.0F, 3);
    file = writer.path();
  }
  auto seen = run_directory::read_with_tensorboard(file, dir.path());
  if (!seen) return;
  CHECK(seen->records == 3);
  CHECK(seen->scalars["loss"] == std::vector<std::pair<std::int64_t, double>>{{1, 1.0}, {3, 3.0}});
}

TEST_CASE("StepCounterHook with SummaryOutput: a tag that is not UTF-8 throws at begin(), before any file") {
  const hook_test::TempDir dir;
  const fs::path logdir = dir.path() / "run";
  struct Model {
    std::int64_t step = 0;
    void run() { ++step; }
    std::int64_t global_step() const { return step; }
  };
  const auto make = [&] {
    runhooks::MonitoredSession session(
        Model{}, runhooks::StepCounterHook({.every_n_steps = 1, .tag = latin1_cafe},
                                           runhooks::SummaryOutput(logdir, /*log_line=*/false)));
    session.run();
  };
  CHECK_THROWS_WITH_AS(make(),
                       doctest::Contains("SummaryOutput, StepCounterOptions::tag: the summary tag "
                                         "'caf\\xe9' is not UTF-8"),
                       std::invalid_argument);
  CHECK(!fs::exists(logdir));
}
