// Writes the seed corpus of event_reader_fuzz into the directory given as its argument: event
// files made by runhooks::EventFileWriter (so the fuzzer starts from records whose CRCs hold),
// one cut short, one with the fields other event kinds use, and bare Event messages for the
// decoder. Generated at test time, so no binary is committed.

#include <runhooks/summary/event_reader.hpp>
#include <runhooks/summary/event_writer.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>

namespace fs = std::filesystem;
namespace detail = runhooks::detail;

namespace {

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_seed(const fs::path& dir, const std::string& name, std::string_view bytes) {
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) {
    throw std::runtime_error("cannot write " + (dir / name).string());
  }
}

// Runs `write` on a fresh EventFileWriter with a fixed clock and returns the file's bytes.
template <class Write>
std::string written_by_event_file_writer(const fs::path& scratch, Write write) {
  fs::remove_all(scratch);
  std::string bytes;
  {
    runhooks::EventFileWriter writer(scratch, [] {
      return std::chrono::system_clock::time_point{std::chrono::milliseconds{1700000000250}};
    });
    write(writer);
    writer.close();
    if (writer.error()) {
      throw std::runtime_error("cannot write " + writer.path().string());
    }
    bytes = read_bytes(writer.path());
  }
  fs::remove_all(scratch);
  return bytes;
}

// An Event with the fields scalar summaries do not use: graph_def (4), a Summary.Value with
// metadata (9) and a tensor (8) in place of simple_value, unknown varint and fixed32 fields.
std::string event_with_other_fields() {
  std::string metadata;
  detail::put_length_delimited(metadata, 1, "plugin");
  std::string value;
  detail::put_length_delimited(value, 1, "histogram");
  detail::put_key(value, 2, detail::WireType::fixed32);
  detail::put_little_endian(value, 0x3F800000U, 4);
  detail::put_length_delimited(value, 9, metadata);
  detail::put_length_delimited(value, 8, "\x08\x01");
  std::string summary;
  detail::put_length_delimited(summary, 1, value);
  detail::put_key(summary, 7, detail::WireType::varint);
  detail::put_varint(summary, 300);

  std::string event;
  detail::put_event_header(event, 1700000000.5, 7);
  detail::put_length_delimited(event, 4, "graph");
  detail::put_length_delimited(event, 5, summary);
  detail::put_key(event, 99, detail::WireType::fixed32);
  detail::put_little_endian(event, 1, 4);
  return event;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  try {
    const fs::path dir = argv[1];
    fs::create_directories(dir);
    const fs::path scratch = dir / ".writer";

    const std::string file_version = written_by_event_file_writer(scratch, [](auto&) {});
    write_seed(dir, "file_version.tfevents", file_version);

    const std::string scalars = written_by_event_file_writer(scratch, [](auto& writer) {
      writer.add_scalar("global_step/sec", 41.5F, 100);
      writer.add_scalar("loss", 0.0F, -1);  // a ten-byte varint
      writer.add_scalar("", -2.5F, 0);      // tag and step absent on the wire
      writer.add_scalar("nan", std::numeric_limits<float>::quiet_NaN(), 1'000'000'000'000);
    });
    write_seed(dir, "scalars.tfevents", scalars);
    write_seed(dir, "truncated.tfevents", std::string_view(scalars).substr(0, scalars.size() - 7));

    const std::string other = event_with_other_fields();
    write_seed(dir, "other_fields.tfevents", file_version + detail::frame_record(other));

    // Bare messages, for the decoder on its own.
    write_seed(dir, "event_scalar.pb", detail::encode_scalar_event(1700000000.25, 100, "global_step/sec", 41.5F));
    write_seed(dir, "event_file_version.pb",
               detail::encode_file_version_event(1700000000.0, "brain.Event:2", "runhooks"));
    write_seed(dir, "event_other_fields.pb", other);

    // The seeds must say what they claim: the whole ones read, the cut one does not.
    if (runhooks::parse_events(scalars).size() != 5 || runhooks::parse_events(file_version + detail::frame_record(other)).size() != 2) {
      throw std::runtime_error("a seed does not read back");
    }
    try {
      runhooks::parse_events(std::string_view(scalars).substr(0, scalars.size() - 7));
      throw std::runtime_error("the truncated seed reads back");
    } catch (const runhooks::EventFileError&) {
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "make_event_seeds: %s\n", error.what());
    return 1;
  }
  return 0;
}
