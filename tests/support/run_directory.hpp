// Reading a run directory (every event file in it) as TensorBoard does, with the project's reader
// and with TensorBoard's own code (tools/read_summaries.py), for the tests of issue 17's "one event
// file per log directory".
#pragma once

#include <runhooks/summary/event_reader.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/hook_test_support.hpp"

namespace run_directory {

namespace fs = std::filesystem;

// The event files of `dir`, in TensorBoard's order (by name), and their events in that order.
struct Events {
  std::vector<fs::path> files;
  std::vector<runhooks::Event> events;

  // The session logs with this status, as (step, checkpoint_path).
  std::vector<std::pair<std::int64_t, std::string>> session_logs(runhooks::SessionLog::Status status) const {
    std::vector<std::pair<std::int64_t, std::string>> out;
    for (const auto& event : events)
      if (event.session_log && event.session_log->status == status)
        out.emplace_back(event.step, event.session_log->checkpoint_path);
    return out;
  }
  // The steps at which `tag` has a value.
  std::vector<std::int64_t> steps_of(const std::string& tag) const {
    std::vector<std::int64_t> out;
    for (const auto& event : events)
      for (const auto& value : event.summary)
        if (value.tag == tag) out.push_back(event.step);
    return out;
  }
};

inline Events read_events(const fs::path& dir) {
  Events out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find("tfevents") != std::string::npos)
      out.files.push_back(entry.path());
  std::sort(out.files.begin(), out.files.end());
  for (const auto& file : out.files)
    for (auto& event : runhooks::read_event_file(file)) out.events.push_back(std::move(event));
  return out;
}

// What TensorBoard's EventAccumulator returns for a run directory (or one file): see
// tools/read_summaries.py for the lines parsed here.
struct TensorBoardView {
  int files = 0;
  int records = 0;
  std::vector<std::string> session_logs;  // "STEP\tSTATUS" or "STEP\tSTATUS\tPATH", in file order
  std::map<std::string, std::vector<std::pair<std::int64_t, double>>> scalars;  // tag -> (step, value)
  std::map<std::string, std::vector<std::int64_t>> histograms;                 // tag -> steps
};

// Nothing, with a message saying the check was skipped, without the tensorboard package or the
// source tree; a failed read is a test failure.
inline std::optional<TensorBoardView> read_with_tensorboard(const fs::path& path, const fs::path& scratch) {
  const auto script = hook_test::tool("read_summaries.py");
  if (!script) {
    MESSAGE("skipped: set RUNHOOKS_SOURCE_DIR to the source tree to run tools/read_summaries.py");
    return std::nullopt;
  }
  if (!hook_test::python_has("tensorboard")) {
    MESSAGE("skipped: the tensorboard Python package is not installed (pip install tensorboard)");
    return std::nullopt;
  }
  const auto run = hook_test::run_python(*script, hook_test::shell_quote(path.string()), scratch);
  INFO("tools/read_summaries.py stderr: ", run.err);
  REQUIRE(run.status == 0);

  TensorBoardView view;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> fields;
    std::istringstream split(line);
    for (std::string field; std::getline(split, field, '\t');) fields.push_back(field);
    if (fields.empty()) continue;
    if (fields[0] == "files" && fields.size() == 2) {
      view.files = std::stoi(fields[1]);
    } else if (fields[0] == "records" && fields.size() == 2) {
      view.records = std::stoi(fields[1]);
    } else if (fields[0] == "session_log") {
      view.session_logs.push_back(line.substr(line.find('\t') + 1));
    } else if (fields[0] == "scalar" && fields.size() == 4) {
      view.scalars[fields[1]].emplace_back(std::stoll(fields[2]), std::stod(fields[3]));
    } else if (fields[0] == "histogram" && fields.size() >= 3) {
      view.histograms[fields[1]].push_back(std::stoll(fields[2]));
    }
  }
  return view;
}

// The steps of a tag's points, in TensorBoard's order.
inline std::vector<std::int64_t> steps(const std::vector<std::pair<std::int64_t, double>>& points) {
  std::vector<std::int64_t> out;
  for (const auto& point : points) out.push_back(point.first);
  return out;
}

}  // namespace run_directory
