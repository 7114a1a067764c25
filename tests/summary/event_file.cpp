// Event files: CRC-32C, TFRecord framing and Event encoding of runhooks::EventFileWriter, checked
// against published CRC vectors, bytes TensorFlow wrote, our reader, and TensorBoard's reader.

#include <runhooks/detail/crc32c.hpp>
#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>

#include <doctest/doctest.h>
#include <support/hook_test_support.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
using runhooks::Event;
using runhooks::EventFileWriter;
using runhooks::SummaryValue;

namespace {

// A fresh directory per test, removed afterwards, so tests can run in parallel and leave nothing.
struct TempDir : hook_test::TempDir {
  TempDir() : hook_test::TempDir("runhooks-event-file-") {}
};

// A wall clock that returns the given times, in milliseconds since the epoch, one per call, and
// then repeats the last: tests pin the times so the file's bytes and name are known.
EventFileWriter::WallClock scripted_clock(std::vector<std::int64_t> milliseconds) {
  auto times = std::make_shared<std::vector<std::int64_t>>(std::move(milliseconds));
  auto next = std::make_shared<std::size_t>(0);
  return [times, next] {
    const std::int64_t ms = (*times)[*next];
    if (*next + 1 < times->size()) {
      ++*next;
    }
    return std::chrono::system_clock::time_point{std::chrono::milliseconds{ms}};
  };
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string bytes_of(std::initializer_list<std::uint8_t> bytes) {
  std::string out;
  for (const std::uint8_t b : bytes) {
    out.push_back(static_cast<char>(b));
  }
  return out;
}

Event scalar_event(double wall_time, std::int64_t step, std::string tag, float value) {
  return Event{wall_time, step, "", "", {SummaryValue{std::move(tag), value}}, {}};
}

}  // namespace

TEST_CASE("crc32c matches the published check values") {
  // The CRC catalogue's check value for CRC-32C, and the iSCSI vectors of RFC 3720, B.4.
  CHECK(runhooks::detail::crc32c("123456789") == 0xE3069283U);
  std::array<std::byte, 32> bytes{};
  CHECK(runhooks::detail::crc32c(bytes) == 0x8A9136AAU);
  bytes.fill(std::byte{0xFF});
  CHECK(runhooks::detail::crc32c(bytes) == 0x62A8AB43U);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>(i);
  }
  CHECK(runhooks::detail::crc32c(bytes) == 0x46DD794EU);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>(31 - i);
  }
  CHECK(runhooks::detail::crc32c(bytes) == 0x113FDB5CU);
  CHECK(runhooks::detail::crc32c("") == 0U);
}

TEST_CASE("masked crc32c is TensorFlow's") {
  // The header of a 36-byte record as tf.io.TFRecordWriter wrote it: length, masked CRC.
  const std::string length = bytes_of({0x24, 0, 0, 0, 0, 0, 0, 0});
  CHECK(runhooks::detail::masked_crc32c(runhooks::detail::crc32c(length)) == 0x4D802B42U);
  for (const std::uint32_t crc : {0U, 1U, 0xE3069283U, 0xFFFFFFFFU}) {
    CHECK(runhooks::detail::unmasked_crc32c(runhooks::detail::masked_crc32c(crc)) == crc);
  }
}

TEST_CASE("EventFileWriter writes the bytes TensorFlow writes") {
  // Written by tf.io.TFRecordWriter (TensorFlow 2.21) from event_pb2.Event messages serialised
  // by protobuf: the file-version event, then scalars at steps 100, -1 (a ten-byte varint) and
  // 0 (omitted, as proto3 does), the last two with simple_value 0.0 and -2.5.
  const std::string tensorflow_bytes = bytes_of({
    0x24, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x42, 0x2b, 0x80, 0x4d, 0x09, 0x00, 0x00, 0x00,
    0x40, 0xfc, 0x54, 0xd9, 0x41, 0x1a, 0x0d, 0x62, 0x72, 0x61, 0x69, 0x6e, 0x2e, 0x45, 0x76, 0x65,
    0x6e, 0x74, 0x3a, 0x32, 0x52, 0x0a, 0x0a, 0x08, 0x72, 0x75, 0x6e, 0x68, 0x6f, 0x6f, 0x6b, 0x73,
    0xe8, 0xe1, 0x89, 0x39, 0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xea, 0xbc, 0x36, 0xf3,
    0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x64, 0x2a, 0x18, 0x0a, 0x16, 0x0a,
    0x0f, 0x67, 0x6c, 0x6f, 0x62, 0x61, 0x6c, 0x5f, 0x73, 0x74, 0x65, 0x70, 0x2f, 0x73, 0x65, 0x63,
    0x15, 0x00, 0x00, 0x28, 0x41, 0xaf, 0x0c, 0x6e, 0x9c, 0x23, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0xb0, 0x9f, 0x77, 0x43, 0x09, 0x00, 0x00, 0x50, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x2a, 0x0d, 0x0a, 0x0b, 0x0a, 0x04, 0x6c,
    0x6f, 0x73, 0x73, 0x15, 0x00, 0x00, 0x00, 0x00, 0xf8, 0x2b, 0xb7, 0xed, 0x15, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0xd6, 0xab, 0x6b, 0x2b, 0x09, 0x00, 0x00, 0x50, 0x40, 0xfc, 0x54, 0xd9,
    0x41, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 0x78, 0x15, 0x00, 0x00, 0x20, 0xc0, 0x62, 0x7d, 0x5c,
    0xcd,
  });
  const TempDir dir;
  fs::path path;
  {
    EventFileWriter writer(dir.path(), scripted_clock({1700000000000, 1700000000500, 1700000001250}));
    writer.add_scalar("global_step/sec", 10.5F, 100);
    writer.add_scalar("loss", 0.0F, -1);
    writer.add_scalar("x", -2.5F, 0);
    path = writer.path();
  }
  CHECK(read_bytes(path) == tensorflow_bytes);
}

TEST_CASE("read_event_file returns what EventFileWriter wrote") {
  const TempDir dir;
  EventFileWriter writer(dir.path(), scripted_clock({1700000000000, 1700000000250, 1700000000500,
                            1700000000750, 1700000001000}));
  writer.add_scalar("global_step/sec", 12.75F, 10);
  writer.add_scalar("global_step/sec", 3.0e-7F, 20);
  writer.add_scalar("bar/foo/sec", -1.0e30F, 4'000'000'000'000);
  writer.add_scalar("", 0.0F, 0);  // empty tag and step: absent on the wire, still read back
  writer.close();

  const std::vector<Event> expected{
    Event{1700000000.0, 0, "brain.Event:2", "runhooks", {}, {}},
    scalar_event(1700000000.25, 10, "global_step/sec", 12.75F),
    scalar_event(1700000000.5, 20, "global_step/sec", 3.0e-7F),
    scalar_event(1700000000.75, 4'000'000'000'000, "bar/foo/sec", -1.0e30F),
    scalar_event(1700000001.0, 0, "", 0.0F),
  };
  CHECK(runhooks::read_event_file(writer.path()) == expected);
}

TEST_CASE("session logs: the bytes protobuf serialises; one START per session; read back") {
  // event_pb2.Event(wall_time, step, session_log=SessionLog(...)).SerializeToString(), TensorBoard's
  // copy of tensorflow/core/util/event.proto: START at step 1, then CHECKPOINT at step 40.
  const std::string start = bytes_of({0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10,
                                      0x01, 0x3a, 0x02, 0x08, 0x01});
  const std::string checkpoint = bytes_of({
    0x09, 0x00, 0x00, 0x50, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x28, 0x3a, 0x17, 0x08, 0x03, 0x12,
    0x13, 0x2f, 0x61, 0x62, 0x73, 0x2f, 0x64, 0x69, 0x72, 0x2f, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e,
    0x63, 0x6b, 0x70, 0x74,
  });
  const TempDir dir;
  EventFileWriter writer(dir.path(), scripted_clock({1700000000000, 1700000000500, 1700000001250,
                                                     1700000002000}));
  const std::string header = read_bytes(writer.path());  // the file-version record
  writer.add_session_start(1);
  writer.add_session_start(2);  // the same session: nothing
  writer.add_checkpoint(40, "/abs/dir/model.ckpt");
  writer.flush();
  CHECK(read_bytes(writer.path()) ==
        header + runhooks::detail::frame_record(start) + runhooks::detail::frame_record(checkpoint));

  writer.begin_session();  // a new session: its START is written
  writer.add_session_start(41);
  writer.add_session_start(42);
  writer.close();
  using runhooks::SessionLog;
  const std::vector<Event> events = runhooks::read_event_file(writer.path());
  REQUIRE(events.size() == 4);
  CHECK(events[1].session_log == SessionLog{SessionLog::Status::start, "", ""});
  CHECK(events[1].step == 1);
  CHECK(events[2].session_log ==
        SessionLog{SessionLog::Status::checkpoint, "/abs/dir/model.ckpt", ""});
  CHECK(events[2].step == 40);
  CHECK(events[2].summary.empty());
  CHECK(events[3].session_log == SessionLog{SessionLog::Status::start, "", ""});
  CHECK(events[3].step == 41);
  CHECK_FALSE(events[0].session_log.has_value());
}

TEST_CASE("reader: a session log's message, an unknown status, and an unknown field") {
  // SessionLog{status: STOP (2), msg: "bye"}, then SessionLog{status: 7, field 9: varint 1}.
  const std::string stop = bytes_of({0x3a, 0x07, 0x08, 0x02, 0x1a, 0x03, 0x62, 0x79, 0x65});
  const std::string unknown = bytes_of({0x3a, 0x04, 0x08, 0x07, 0x48, 0x01});
  const auto events = runhooks::parse_events(runhooks::detail::frame_record(stop) +
                                             runhooks::detail::frame_record(unknown));
  REQUIRE(events.size() == 2);
  using runhooks::SessionLog;
  CHECK(events[0].session_log == SessionLog{SessionLog::Status::stop, "", "bye"});
  REQUIRE(events[1].session_log.has_value());
  CHECK(static_cast<int>(events[1].session_log->status) == 7);
}

TEST_CASE("the file name is TensorFlow's, and writers in one second do not collide") {
  const TempDir dir;
  const auto clock = scripted_clock({1234567890123});
  EventFileWriter first(dir.path() / "run" / "train", clock);  // creates missing parents
  EventFileWriter second(dir.path() / "run" / "train", clock);
  EventFileWriter third(dir.path() / "run" / "train", clock);

  const std::string base = "events.out.tfevents.1234567890." + runhooks::detail::host_name();
  CHECK(first.path() == dir.path() / "run" / "train" / base);
  CHECK(second.path() == dir.path() / "run" / "train" / (base + ".1"));
  CHECK(third.path() == dir.path() / "run" / "train" / (base + ".2"));

  // Ten digits, as TensorFlow's "%010lld", for times before 2001.
  EventFileWriter early(dir.path(), scripted_clock({5000}));
  CHECK(early.path().filename().string().rfind("events.out.tfevents.0000000005.", 0) == 0);

  second.add_scalar("which", 2.0F, 1);
  second.close();
  first.close();
  CHECK(runhooks::read_event_file(first.path()).size() == 1);
  CHECK(runhooks::read_event_file(second.path()).size() == 2);
}

TEST_CASE("flush() makes records readable while the writer is open") {
  const TempDir dir;
  EventFileWriter writer(dir.path(), scripted_clock({1700000000000}));
  CHECK(runhooks::read_event_file(writer.path()).size() == 1);  // the constructor flushes
  writer.add_scalar("global_step/sec", 1.0F, 1);
  writer.flush();
  const auto events = runhooks::read_event_file(writer.path());
  REQUIRE(events.size() == 2);
  CHECK(events[1] == scalar_event(1700000000.0, 1, "global_step/sec", 1.0F));

  EventFileWriter moved = std::move(writer);
  moved.add_scalar("global_step/sec", 2.0F, 2);
  moved.close();
  moved.close();  // idempotent
  CHECK(runhooks::read_event_file(moved.path()).size() == 3);
}

TEST_CASE("read_event_file rejects corrupt and truncated records, naming the offset") {
  const TempDir dir;
  fs::path path;
  {
    EventFileWriter writer(dir.path(), scripted_clock({1700000000000}));
    writer.add_scalar("global_step/sec", 5.0F, 100);
    path = writer.path();
  }
  const std::string good = read_bytes(path);
  const auto first_record = runhooks::read_event_file(path);
  REQUIRE(first_record.size() == 2);
  // Record 0 is 16 bytes of framing around the file-version event; record 1 starts after it.
  const std::size_t second = 16 + static_cast<std::size_t>(static_cast<std::uint8_t>(good[0]));
  REQUIRE(second < good.size());

  struct Corruption {
    const char* name;
    std::size_t byte;
    const char* message;
  };
  const Corruption cases[] = {
    {"length", second + 0, "length CRC mismatch"},
    {"length CRC", second + 9, "length CRC mismatch"},
    {"data", second + 12 + 3, "data CRC mismatch"},
    {"data CRC", good.size() - 1, "data CRC mismatch"},
    {"first record", 14, "data CRC mismatch"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::string bad = good;
    bad[c.byte] = static_cast<char>(bad[c.byte] ^ 0x01);
    write_bytes(path, bad);
    const std::size_t offset = c.byte < second ? 0 : second;
    CHECK_THROWS_WITH_AS(runhooks::read_event_file(path),
               doctest::Contains(("record at offset " + std::to_string(offset) + ": " +
                        c.message).c_str()),
               std::runtime_error);
    CHECK_THROWS_WITH_AS(runhooks::read_event_file(path), doctest::Contains(path.string().c_str()),
               std::runtime_error);
  }

  for (const std::size_t cut : {good.size() - 1, second + 20, second + 5}) {
    CAPTURE(cut);
    write_bytes(path, std::string_view(good).substr(0, cut));
    CHECK_THROWS_WITH_AS(runhooks::read_event_file(path),
               doctest::Contains(("record at offset " + std::to_string(second) + ": truncated").c_str()),
               std::runtime_error);
  }

  // Framing intact but the Event inside malformed: a length-delimited field longer than the data.
  const std::string event = bytes_of({0x1a, 0x7f, 0x62});
  write_bytes(path, runhooks::detail::frame_record(event));
  CHECK_THROWS_WITH_AS(runhooks::read_event_file(path), doctest::Contains("malformed Event"),
             std::runtime_error);
}

namespace {

// A TFRecord header for `length`: the length and its masked CRC, valid whatever the length.
std::string record_header(std::uint64_t length) {
  std::string header;
  runhooks::detail::put_little_endian(header, length, 8);
  runhooks::detail::put_little_endian(
    header, runhooks::detail::masked_crc32c(runhooks::detail::crc32c(header)), 4);
  return header;
}

// Reads `bytes` from memory, from a stream and from a file; each must throw EventFileError at
// `offset` with a message that says `what` and names the source.
void check_rejected(std::string_view bytes, std::uint64_t offset, const std::string& what) {
  const std::string expected = "record at offset " + std::to_string(offset) + ": " + what;
  const auto check = [&](auto read, const std::string& source) {
    try {
      read();
      FAIL("read without error: ", expected);
    } catch (const runhooks::EventFileError& error) {
      CHECK(error.offset() == offset);
      CHECK_MESSAGE(std::string_view(error.what()).find(expected) != std::string_view::npos,
              error.what());
      CHECK_MESSAGE(std::string_view(error.what()).find(source) != std::string_view::npos,
              error.what());
    }
  };
  check([&] { return runhooks::parse_events(bytes, "in-memory bytes"); }, "in-memory bytes");
  std::istringstream stream{std::string(bytes)};
  check([&] { return runhooks::read_events(stream, "a stream"); }, "a stream");
  const TempDir dir;
  const fs::path path = dir.path() / "events.out.tfevents.bad";
  write_bytes(path, bytes);
  check([&] { return runhooks::read_event_file(path); }, path.string());
}

// The largest single allocation made through operator new since the last reset. A reader that
// took a length field at its word would ask for that many bytes.
std::atomic<std::size_t> largest_allocation{0};

void note_allocation(std::size_t size) noexcept {
  std::size_t seen = largest_allocation.load(std::memory_order_relaxed);
  while (size > seen && !largest_allocation.compare_exchange_weak(seen, size)) {
  }
}

}  // namespace

// GCC 12 at -O2, inlining a std::make_unique<std::thread> (the event file's writer thread) into
// these replacements, takes the free() below for a mismatch with the new it inlined
// (-Wmismatched-new-delete); both sides are this file's malloc and free.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
  note_allocation(size);
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Regression tests for what the fuzzer (tests/fuzz/event_reader_fuzz.cpp) probes: each
// malformed input is one EventFileError naming the record's offset and what is wrong, the same
// from memory, a stream and a file.
TEST_CASE("reader: truncated header, data and data CRC") {
  const std::string good = runhooks::detail::frame_record(
    runhooks::detail::encode_file_version_event(1700000000.0, "brain.Event:2", "runhooks"));
  const std::string scalar = runhooks::detail::frame_record(
    runhooks::detail::encode_scalar_event(1700000000.0, 1, "loss", 1.0F));
  check_rejected(std::string_view(good).substr(0, 5), 0, "truncated header (5 of 12 bytes)");
  check_rejected(good + scalar.substr(0, 11), good.size(),
           "truncated header (11 of 12 bytes)");
  check_rejected(good + record_header(100) + std::string(40, 'x'), good.size(),
           "truncated data (the header says 100 bytes, 40 follow)");
  check_rejected(good + scalar.substr(0, scalar.size() - 2), good.size(),
           "truncated data CRC (2 of 4 bytes)");
  check_rejected(good + record_header(0), good.size(), "truncated data CRC (0 of 4 bytes)");
}

TEST_CASE("reader: bad length CRC and bad data CRC give both CRCs") {
  const std::string good = runhooks::detail::frame_record(
    runhooks::detail::encode_scalar_event(1700000000.0, 1, "loss", 1.0F));
  std::string bad_length = good;
  bad_length[8] = static_cast<char>(bad_length[8] ^ 0x10);
  check_rejected(bad_length, 0, "length CRC mismatch (stored 0x");
  std::string bad_data = good;
  bad_data[13] = static_cast<char>(bad_data[13] ^ 0x10);
  check_rejected(bad_data, 0, "data CRC mismatch (stored 0x");
  std::string second_bad = good + good;
  second_bad.back() = static_cast<char>(second_bad.back() ^ 0x01);
  check_rejected(second_bad, good.size(), "data CRC mismatch");
}

TEST_CASE("reader: a huge length field allocates no more than the bytes that follow") {
  const std::string good = runhooks::detail::frame_record(
    runhooks::detail::encode_scalar_event(1700000000.0, 1, "loss", 1.0F));
  for (const std::uint64_t length : {std::uint64_t{1} << 33, std::uint64_t{1} << 62, ~std::uint64_t{0}}) {
    CAPTURE(length);
    const std::string bytes = good + record_header(length) + "abc";
    largest_allocation = 0;
    check_rejected(bytes, good.size(),
             "truncated data (the header says " + std::to_string(length) + " bytes, 3 follow)");
    CHECK(largest_allocation.load() < (std::size_t{1} << 20));
  }
}

TEST_CASE("reader: garbage protobuf inside valid framing is a malformed Event") {
  const auto framed = [](std::string_view event) { return runhooks::detail::frame_record(event); };
  check_rejected(framed(std::string(12, '\xff')), 0, "malformed Event: varint longer than 10 bytes");
  check_rejected(framed(bytes_of({0x07, 0x00})), 0, "malformed Event: invalid field number 0");
  check_rejected(framed(bytes_of({0xf8, 0xff, 0xff, 0xff, 0x7f, 0x00})), 0,
           "malformed Event: invalid field number 4294967295");
  check_rejected(framed(bytes_of({0x0f, 0x00})), 0, "malformed Event: invalid wire type 7 in field 1");
  check_rejected(framed(bytes_of({0x1b, 0x1c})), 0,
           "malformed Event: group (wire type 3) in field 3: not supported");
  check_rejected(framed(bytes_of({0x09, 0x00, 0x00, 0x00})), 0,
           "malformed Event: message ends inside a field");
  // The largest field number protobuf allows is skipped like any unknown field.
  CHECK(runhooks::parse_events(framed(bytes_of({0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00}))).size() == 1);
}

TEST_CASE("reader: varint overflow") {
  // Eleven bytes: longer than any 64-bit varint.
  check_rejected(runhooks::detail::frame_record(
             bytes_of({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})),
           0, "malformed Event: varint longer than 10 bytes");
  // Ten bytes whose last one carries bits past the 64th: dropped, as protobuf (C++ and upb,
  // TensorBoard's parser) drops them, so both read step -1.
  const auto events = runhooks::parse_events(runhooks::detail::frame_record(
    bytes_of({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})));
  REQUIRE(events.size() == 1);
  CHECK(events[0].step == -1);
}

TEST_CASE("reader: a nested length beyond its message") {
  // Event.summary of 4 bytes holding a Summary.Value that claims 100.
  check_rejected(runhooks::detail::frame_record(bytes_of({0x2a, 0x04, 0x0a, 0x64, 0x0a, 0x00})), 0,
           "malformed Event: length-delimited field of 100 bytes runs past the end of its "
           "message (2 bytes left)");
  // A Summary.Value whose tag claims more than the value holds.
  check_rejected(runhooks::detail::frame_record(bytes_of({0x2a, 0x04, 0x0a, 0x02, 0x0a, 0x05})), 0,
           "malformed Event: length-delimited field of 5 bytes runs past the end of its "
           "message (0 bytes left)");
  // source_metadata likewise.
  check_rejected(runhooks::detail::frame_record(bytes_of({0x52, 0x02, 0x0a, 0x01})), 0,
           "malformed Event: length-delimited field of 1 bytes runs past the end of its "
           "message (0 bytes left)");
}

TEST_CASE("reader: a record larger than a read piece (64 KiB) reads whole, or truncated") {
  const TempDir dir;
  const std::string tag(200'000, 'g');  // the data is read in four pieces
  fs::path path;
  {
    EventFileWriter writer(dir.path(), scripted_clock({1700000000000}));
    writer.add_scalar(tag, 2.0F, 7);
    path = writer.path();
  }
  const std::string bytes = read_bytes(path);
  const auto events = runhooks::read_event_file(path);
  REQUIRE(events.size() == 2);
  CHECK(events[1] == scalar_event(1700000000.0, 7, tag, 2.0F));
  std::istringstream stream(bytes);
  CHECK(runhooks::read_events(stream) == events);
  CHECK(runhooks::parse_events(bytes) == events);

  const std::size_t second = 16 + static_cast<std::size_t>(static_cast<std::uint8_t>(bytes[0]));
  const std::size_t length = bytes.size() - second - 16;
  check_rejected(std::string_view(bytes).substr(0, second + 12 + 150'000), second,
           "truncated data (the header says " + std::to_string(length) + " bytes, 150000 follow)");
}

TEST_CASE("read_events reads a stream from where it stands; parse_events reads memory") {
  const TempDir dir;
  fs::path path;
  {
    EventFileWriter writer(dir.path(), scripted_clock({1700000000000}));
    writer.add_scalar("global_step/sec", 5.0F, 100);
    writer.add_scalar("global_step/sec", 6.0F, 200);
    path = writer.path();
  }
  const std::string bytes = read_bytes(path);
  const auto all = runhooks::read_event_file(path);
  REQUIRE(all.size() == 3);
  CHECK(runhooks::parse_events(bytes) == all);

  std::istringstream stream(bytes);
  const std::size_t first = 16 + static_cast<std::size_t>(static_cast<std::uint8_t>(bytes[0]));
  stream.seekg(static_cast<std::streamoff>(first));
  CHECK(runhooks::read_events(stream) == std::vector<Event>(all.begin() + 1, all.end()));

  // Offsets in errors count from where the stream stood.
  std::string cut = bytes.substr(0, bytes.size() - 1);
  std::istringstream cut_stream(cut);
  cut_stream.seekg(static_cast<std::streamoff>(first));
  try {
    runhooks::read_events(cut_stream, "the cut stream");
    FAIL("a cut stream was read");
  } catch (const runhooks::EventFileError& error) {
    const std::size_t second = 16 + static_cast<std::size_t>(static_cast<std::uint8_t>(bytes[first]));
    CHECK(error.offset() == second);
    CHECK(std::string_view(error.what()).find("the cut stream") != std::string_view::npos);
  }
  CHECK(runhooks::parse_events("").empty());
}

TEST_CASE("errors name the path and are never silent") {
  const TempDir dir;
  const fs::path not_a_directory = dir.path() / "file";
  write_bytes(not_a_directory, "x");
  CHECK_THROWS_WITH_AS(EventFileWriter(not_a_directory / "logs"),
             doctest::Contains(not_a_directory.string().c_str()), std::system_error);

  const fs::path missing = dir.path() / "missing.tfevents";
  CHECK_THROWS_WITH_AS(runhooks::read_event_file(missing), doctest::Contains(missing.string().c_str()),
             std::system_error);

  EventFileWriter writer(dir.path());
  writer.close();
  CHECK_THROWS_WITH_AS(writer.add_scalar("global_step/sec", 1.0F, 1),
             doctest::Contains(writer.path().string().c_str()), std::system_error);
  CHECK_THROWS_AS(writer.flush(), std::system_error);
}

TEST_CASE("the real system clock stamps events with the current time") {
  const TempDir dir;
  const double before = runhooks::detail::to_wall_time(std::chrono::system_clock::now());
  EventFileWriter writer(dir.path());
  writer.add_scalar("global_step/sec", 1.0F, 1);
  writer.close();
  const double after = runhooks::detail::to_wall_time(std::chrono::system_clock::now());
  for (const Event& event : runhooks::read_event_file(writer.path())) {
    CHECK(event.wall_time >= before);
    CHECK(event.wall_time <= after);
  }
}

namespace {

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return quoted + "'";
}

struct TensorBoardOutput {
  std::string reader;
  std::size_t records = 0;
  std::string file_version;
  std::vector<std::tuple<std::string, std::int64_t, double, float>> scalars;
};

// Runs tools/read_events.py; its output format is described in that script.
TensorBoardOutput run_read_events(const fs::path& script, const fs::path& event_file, bool no_tensorflow,
                 const fs::path& scratch) {
  const fs::path out = scratch / "read_events.out";
  const fs::path err = scratch / "read_events.err";
  const std::string command = "python3 " + shell_quote(script.string()) +
                (no_tensorflow ? " --no-tensorflow " : " ") + shell_quote(event_file.string()) +
                " > " + shell_quote(out.string()) + " 2> " + shell_quote(err.string());
  const int status = std::system(command.c_str());
  INFO("command: ", command);
  INFO("stderr: ", read_bytes(err));
  REQUIRE(status == 0);

  TensorBoardOutput result;
  std::istringstream lines(read_bytes(out));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string kind;
    std::getline(fields, kind, '\t');
    if (kind == "reader") {
      std::getline(fields, result.reader);
    } else if (kind == "records") {
      fields >> result.records;
    } else if (kind == "file_version") {
      std::getline(fields, result.file_version);
    } else if (kind == "scalar") {
      std::string tag, step, wall_time, value;
      std::getline(fields, tag, '\t');
      std::getline(fields, step, '\t');
      std::getline(fields, wall_time, '\t');
      std::getline(fields, value);
      result.scalars.emplace_back(tag, std::stoll(step), std::stod(wall_time), std::stof(value));
    }
  }
  return result;
}

}  // namespace

TEST_CASE("TensorBoard reads the scalars EventFileWriter wrote") {
  const char* source_dir = std::getenv("RUNHOOKS_SOURCE_DIR");
  if (source_dir == nullptr) {
    MESSAGE("skipped: set RUNHOOKS_SOURCE_DIR to the source tree to run tools/read_events.py");
    return;
  }
  const fs::path script = fs::path(source_dir) / "tools" / "read_events.py";
  REQUIRE_MESSAGE(fs::exists(script), script.string());
  if (std::system("python3 -c \"import tensorboard\" > /dev/null 2>&1") != 0) {
    MESSAGE("skipped: the tensorboard Python package is not installed (pip install tensorboard)");
    return;
  }

  const TempDir dir;
  const std::vector<std::tuple<std::string, std::int64_t, double, float>> written{
    {"global_step/sec", 100, 1700000000.25, 41.5F},
    {"global_step/sec", 200, 1700000000.5, 38.125F},
    {"global_step/sec", 300, 1700000001.75, 0.1F},
    {"loss", 300, 1700000002.0, -3.0e-5F},
  };
  std::vector<std::int64_t> times{1700000000000};
  for (const auto& [tag, step, wall_time, value] : written) {
    times.push_back(static_cast<std::int64_t>(wall_time * 1000));
  }
  fs::path path;
  {
    EventFileWriter writer(dir.path() / "run", scripted_clock(times));
    for (const auto& [tag, step, wall_time, value] : written) {
      writer.add_scalar(tag, value, step);
    }
    path = writer.path();
  }

  // Without a flag TensorBoard picks TensorFlow's record reader if TensorFlow is installed;
  // its pure-Python reader is then checked too.
  const auto check = [&](bool no_tensorflow) {
    const TensorBoardOutput seen = run_read_events(script, path, no_tensorflow, dir.path());
    MESSAGE("TensorBoard read the event file with its ", seen.reader, " record reader");
    CHECK(seen.records == written.size() + 1);
    CHECK(seen.file_version == "brain.Event:2");
    CHECK(seen.scalars == written);
    return seen.reader;
  };
  if (check(false) == "tensorflow") {
    check(true);
  }
}
