// libFuzzer target for <runhooks/summary/event_reader.hpp>: TFRecord framing and the
// Event/Summary decoder on arbitrary bytes. Built only by a clang build where
// -fsanitize=fuzzer links (tests/fuzz/meson.build); the seed corpus is made by make_event_seeds.
//
// Each input is read three ways, and anything but the documented errors is a crash:
//   1. as an event file, from memory (parse_events) and through a stream (read_events), which
//      must agree exactly, events or error message: only EventFileError may come out;
//   2. as one bare Event message (detail::decode_event): only std::invalid_argument may;
//   3. every event read that EventFileWriter could have written is written again, framed and
//      read back, and must come back bit for bit.
// An exception of another type (bad_alloc, length_error, out_of_range) ends in std::terminate,
// which libFuzzer reports with the input; run_fuzz.py sets -malloc_limit_mb so that a length
// field taken at its word is a failure even where the allocation would succeed.

#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace {

// Events compared bit for bit, so that NaNs and -0.0 count as equal to themselves only.
bool same_bits(const runhooks::Event& a, const runhooks::Event& b) {
  if (std::bit_cast<std::uint64_t>(a.wall_time) != std::bit_cast<std::uint64_t>(b.wall_time) ||
      a.step != b.step || a.file_version != b.file_version || a.source_writer != b.source_writer ||
      a.summary.size() != b.summary.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.summary.size(); ++i) {
    const auto& x = a.summary[i];
    const auto& y = b.summary[i];
    if (x.tag != y.tag || x.simple_value.has_value() != y.simple_value.has_value() ||
        (x.simple_value &&
         std::bit_cast<std::uint32_t>(*x.simple_value) != std::bit_cast<std::uint32_t>(*y.simple_value))) {
      return false;
    }
  }
  return true;
}

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "event_reader_fuzz: %s\n", what);
  std::abort();
}

// The events, or the message of the EventFileError that stopped the reading.
using Outcome = std::variant<std::vector<runhooks::Event>, std::string>;

template <class Read>
Outcome outcome_of(Read read) {
  try {
    return read();
  } catch (const runhooks::EventFileError& error) {
    return std::string(error.what());
  }
}

bool same_outcome(const Outcome& a, const Outcome& b) {
  if (a.index() != b.index()) {
    return false;
  }
  if (const auto* message = std::get_if<std::string>(&a)) {
    return *message == std::get<std::string>(b);
  }
  const auto& x = std::get<0>(a);
  const auto& y = std::get<0>(b);
  if (x.size() != y.size()) {
    return false;
  }
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!same_bits(x[i], y[i])) {
      return false;
    }
  }
  return true;
}

// What EventFileWriter would write for `event`, if it writes such events at all.
std::optional<std::string> rewritten(const runhooks::Event& event) {
  namespace detail = runhooks::detail;
  if (event.summary.empty() && !event.file_version.empty() && event.step == 0) {
    return detail::encode_file_version_event(event.wall_time, event.file_version, event.source_writer);
  }
  if (event.summary.size() == 1 && event.summary[0].simple_value && event.file_version.empty() &&
      event.source_writer.empty()) {
    return detail::encode_scalar_event(event.wall_time, event.step, event.summary[0].tag,
                                       *event.summary[0].simple_value);
  }
  return std::nullopt;
}

void check_round_trip(const runhooks::Event& event) {
  const auto bytes = rewritten(event);
  if (!bytes) {
    return;
  }
  const auto back = runhooks::parse_events(runhooks::detail::frame_record(*bytes), "round trip");
  if (back.size() != 1 || !same_bits(back[0], event)) {
    fail("an event written again by EventFileWriter's encoder reads back differently");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  const Outcome from_memory = outcome_of([&] { return runhooks::parse_events(bytes, "fuzz"); });
  std::istringstream stream{std::string(bytes)};
  const Outcome from_stream = outcome_of([&] { return runhooks::read_events(stream, "fuzz"); });
  if (!same_outcome(from_memory, from_stream)) {
    fail("parse_events and read_events disagree");
  }
  if (const auto* events = std::get_if<0>(&from_memory)) {
    for (const auto& event : *events) {
      check_round_trip(event);
    }
  }

  try {
    check_round_trip(runhooks::detail::decode_event(bytes));
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
