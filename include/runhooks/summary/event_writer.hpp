// Defines `runhooks::EventFileWriter`, which appends scalar summaries and session logs to a
// TensorFlow event file that TensorBoard reads, and `runhooks::EventFileWriterCache`, which gives
// every hook writing to one directory the same writer, as TensorFlow's FileWriterCache.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/detail/crc32c.hpp>
#include <runhooks/log.hpp>

#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace runhooks {
namespace detail {

// Protocol-buffer wire types (protobuf "Encoding" guide); only those the event file needs.
enum class WireType : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

inline void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80U) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(value | 0x80U)));
    value >>= 7;
  }
  out.push_back(static_cast<char>(static_cast<std::uint8_t>(value)));
}

inline void put_key(std::string& out, std::uint32_t field, WireType type) {
  put_varint(out, (std::uint64_t{field} << 3) | static_cast<std::uint8_t>(type));
}

// Fixed-width fields and the TFRecord header are little-endian whatever the host is.
inline void put_little_endian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(value >> (8 * i))));
  }
}

inline void put_length_delimited(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, WireType::length_delimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Field numbers of tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto.
inline constexpr std::uint32_t event_wall_time_field = 1;     // double
inline constexpr std::uint32_t event_step_field = 2;          // int64
inline constexpr std::uint32_t event_file_version_field = 3;  // string, in oneof `what`
inline constexpr std::uint32_t event_summary_field = 5;       // Summary, in oneof `what`
inline constexpr std::uint32_t event_source_metadata_field = 10;  // SourceMetadata
inline constexpr std::uint32_t source_metadata_writer_field = 1;  // string
inline constexpr std::uint32_t summary_value_field = 1;       // repeated Summary.Value
inline constexpr std::uint32_t value_tag_field = 1;           // string
inline constexpr std::uint32_t value_simple_value_field = 2;  // float, in oneof `value`

// The first fields of every Event. Proto3 omits a field that holds its default, and so do we,
// so that our bytes match what protobuf itself serialises for the same message.
inline void put_event_header(std::string& out, double wall_time, std::int64_t step) {
  if (const auto bits = std::bit_cast<std::uint64_t>(wall_time); bits != 0) {
    put_key(out, event_wall_time_field, WireType::fixed64);
    put_little_endian(out, bits, 8);
  }
  if (step != 0) {
    put_key(out, event_step_field, WireType::varint);
    put_varint(out, static_cast<std::uint64_t>(step));  // negative: ten bytes, as protobuf does
  }
}

// TensorFlow 2.x's EventsWriter names itself in `source_metadata` of the first event, and
// TensorBoard reports that name (EventAccumulator.GetSourceWriter()); we do the same.
inline std::string encode_file_version_event(double wall_time, std::string_view file_version,
                       std::string_view source_writer) {
  std::string event;
  put_event_header(event, wall_time, 0);
  put_length_delimited(event, event_file_version_field, file_version);
  std::string source_metadata;
  put_length_delimited(source_metadata, source_metadata_writer_field, source_writer);
  put_length_delimited(event, event_source_metadata_field, source_metadata);
  return event;
}

inline std::string encode_scalar_event(double wall_time, std::int64_t step, std::string_view tag,
                    float simple_value) {
  std::string value;
  if (!tag.empty()) {
    put_length_delimited(value, value_tag_field, tag);
  }
  // A member of a oneof has explicit presence, so 0.0f is written too.
  put_key(value, value_simple_value_field, WireType::fixed32);
  put_little_endian(value, std::bit_cast<std::uint32_t>(simple_value), 4);

  std::string summary;
  put_length_delimited(summary, summary_value_field, value);

  std::string event;
  put_event_header(event, wall_time, step);
  put_length_delimited(event, event_summary_field, summary);
  return event;
}

// Event.session_log = SessionLog{status, checkpoint_path} (tensorflow/core/util/event.proto):
// what TensorFlow's hooks write when a session starts (SummarySaverHook) and after each save
// (CheckpointSaverHook).
enum class SessionStatus : std::uint8_t { start = 1, stop = 2, checkpoint = 3 };
struct SessionLogFields {
  static constexpr std::uint32_t in_event = 7;         // Event.session_log, in oneof `what`
  static constexpr std::uint32_t status = 1;           // enum SessionStatus
  static constexpr std::uint32_t checkpoint_path = 2;  // string
};

inline std::string encode_session_log_what(SessionStatus status, std::string_view checkpoint_path = {}) {
  std::string session_log;
  put_key(session_log, SessionLogFields::status, WireType::varint);
  put_varint(session_log, static_cast<std::uint8_t>(status));
  if (!checkpoint_path.empty())
    put_length_delimited(session_log, SessionLogFields::checkpoint_path, checkpoint_path);
  std::string what;
  put_length_delimited(what, SessionLogFields::in_event, session_log);
  return what;
}

// TFRecord framing (tensorflow/core/lib/io/record_writer.h): uint64 length, masked CRC-32C of
// those 8 bytes, the data, masked CRC-32C of the data; all little-endian.
inline std::string frame_record(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  put_little_endian(record, data.size(), 8);
  put_little_endian(record, masked_crc32c(crc32c(record)), 4);
  record.append(data);
  put_little_endian(record, masked_crc32c(crc32c(data)), 4);
  return record;
}

inline std::string host_name() {
#if __has_include(<unistd.h>)
  char name[256] = {};
  // POSIX leaves a truncated name unterminated, hence the size one short of the buffer.
  if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') {
    return name;
  }
#endif
  return "localhost";
}

// Closes without reporting: used only where an exception is already on its way.
struct FileCloser {
  void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};

// Whole seconds and the fraction are converted apart: a double holds today's Unix time in
// nanoseconds only to about 256 ns, which would blur times the caller gave exactly.
inline double to_wall_time(std::chrono::system_clock::time_point t) {
  const auto since_epoch = t.time_since_epoch();
  const auto seconds = std::chrono::floor<std::chrono::seconds>(since_epoch);
  return static_cast<double>(seconds.count()) +
      std::chrono::duration<double>(since_epoch - seconds).count();
}


// The key of a log directory in EventFileWriterCache: absolute, with symlinks and `..` resolved,
// so that "logs", "./logs/" and a symlink to it name one directory. The directory must exist.
inline std::string logdir_key(const std::filesystem::path& logdir) {
  std::error_code error;
  std::filesystem::path key = std::filesystem::canonical(logdir, error);
  if (error) key = std::filesystem::absolute(logdir, error).lexically_normal();
  return key.string();
}

inline void create_logdir(const std::filesystem::path& logdir) {
  if (std::error_code error; !std::filesystem::create_directories(logdir, error) && error)
    throw std::system_error(error, "runhooks::EventFileWriter: cannot create the directory " +
                                       logdir.string());
}

}  // namespace detail

// Writes TensorFlow event files: the format of TF1's `tf.compat.v1.summary.FileWriter`, which
// TensorBoard shows as scalar curves.
//
// Semantics
// ---------
// - The constructor creates `logdir` (and its parents) and a new file in it named
//   `events.out.tfevents.<unix seconds, 10 digits>.<hostname>`, TensorFlow's name. If that
//   file exists (two writers in one second), `.1`, `.2`, ... is appended; the file is created
//   exclusively, so no two writers, in this process or another, ever share a file. The first
//   record, `Event{wall_time, file_version: "brain.Event:2", source_metadata {writer:
//   "runhooks"}}`, is flushed at once, as TensorFlow 2.x's writer does.
// - Hooks and outputs do not construct one: they share one per log directory through
//   EventFileWriterCache, as TensorFlow's hooks share a FileWriter through FileWriterCache.
//   Two event files in one directory written by one run hide data in TensorBoard: it reads
//   the files one after the other, and a SessionLog START in the second drops the first's
//   events at and after its step.
// - `add_scalar(tag, value, step)` appends `Event{wall_time, step, summary {value {tag,
//   simple_value}}}`: what TF1's `StepCounterHook` writes for `global_step/sec`. TensorBoard
//   2.x still shows such legacy `simple_value` scalars in its Scalars dashboard.
// - `add_session_start(step)` appends `SessionLog{status: START}` at `step` once per session:
//   the first call after construction or after `begin_session()` writes, the others do
//   nothing, so the hooks sharing the file write one START per session however many call it.
//   TensorBoard drops the events an earlier run wrote at or after that step (a restart from a
//   checkpoint). `add_checkpoint(step, path)` appends `SessionLog{status: CHECKPOINT,
//   checkpoint_path: path}`, what TensorFlow's CheckpointSaverHook writes after each save.
// - Records go through a stdio buffer: call `flush()` to make them visible to TensorBoard.
//   TF's writer also buffers, and flushes every 120 s by default.
// - I/O failures, the rule of every file output (CsvOutput's too): a directory or file that
//   cannot be created is a `std::system_error` from the constructor naming the path (the
//   directory too). A failure to write, flush or
//   close (disk full, file size limit) never throws and is never silent: the first one logs one
//   warning through runhooks::log with the path and the cause, every later record is dropped,
//   and `error()` tells what happened. The file then holds the records written before the
//   failure, perhaps followed by part of one, which TensorBoard reads as the end of the file.
// - A write or `flush` after `close()` is a mistake in the caller and throws
//   `std::system_error` (`errc::bad_file_descriptor`). A writer from EventFileWriterCache is
//   shared: release the pointer rather than close() it, which closes it for every holder.
// - Thread-safe: any member but moving may be called from several threads at once; each record
//   is written whole, in the order the calls take the writer's mutex.
//
// Cost: an `add_scalar` takes an uncontended mutex, reads the wall clock once, encodes a record
// of about 40 bytes in a few small strings and hands it to `fwrite`. Nothing is done on steps
// where the caller writes nothing.
//
// Differs from TensorFlow: TF's `FileWriter` queues events for a background thread; this one
// writes in the calling thread. A write failure is logged and remembered rather than raised, so
// that a full disk loses the summaries but not the training run. And where two writers pick the
// same name, TF's C++ `EventsWriter` truncates the first file; this one adds a suffix.
class EventFileWriter {
 public:
  // Where wall times come from; injectable so tests can pin the times and the file name.
  // An empty one means `std::chrono::system_clock::now`.
  using WallClock = std::function<std::chrono::system_clock::time_point()>;

  // The version TensorFlow writes in the first record (`kVersionPrefix` + `kCurrentVersion`).
  static constexpr std::string_view file_version = "brain.Event:2";

  // How the first record names this writer (TF writes "tensorflow.core.util.events_writer").
  static constexpr std::string_view source_writer = "runhooks";

  explicit EventFileWriter(const std::filesystem::path& logdir, WallClock wall_clock = {})
    : wall_clock_(std::move(wall_clock)) {
    if (!wall_clock_) {
      wall_clock_ = [] { return std::chrono::system_clock::now(); };
    }
    detail::create_logdir(logdir);
    const auto now = wall_clock_();
    open_new_file(logdir, now);
    write_record(detail::encode_file_version_event(detail::to_wall_time(now), file_version, source_writer));
    flush();
  }

  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Moving is not thread-safe: no other thread may use either writer meanwhile.
  EventFileWriter(EventFileWriter&& other) noexcept
      : wall_clock_(std::move(other.wall_clock_)), path_(std::move(other.path_)),
        file_(std::move(other.file_)), error_(other.error_),
        start_pending_(other.start_pending_) {}

  EventFileWriter& operator=(EventFileWriter&& other) noexcept {
    if (this != &other) {
      close_without_throwing();
      wall_clock_ = std::move(other.wall_clock_);
      path_ = std::move(other.path_);
      file_ = std::move(other.file_);
      error_ = other.error_;
      start_pending_ = other.start_pending_;
    }
    return *this;
  }

  ~EventFileWriter() { close_without_throwing(); }

  // Appends one scalar at `step`, stamped with the current wall time.
  void add_scalar(std::string_view tag, float value, std::int64_t step) {
    const std::lock_guard lock(mutex_);
    require_open();
    write_record(detail::encode_scalar_event(detail::to_wall_time(wall_clock_()), step, tag, value));
  }

  // Appends Event{wall_time, step, <what>}, where `what` is one encoded field of the event's
  // `what` oneof, tag and length included: a Summary holding histograms, a SessionLog
  // (<runhooks/summary/histogram.hpp> encodes both). Same rules as add_scalar.
  void add_event(std::string_view what, std::int64_t step) {
    const std::lock_guard lock(mutex_);
    add_event_locked(what, step);
  }

  // SessionLog START at `step`, unless this session has one already (see the class comment).
  void add_session_start(std::int64_t step) {
    const std::lock_guard lock(mutex_);
    require_open();
    if (!start_pending_) return;
    start_pending_ = false;
    add_event_locked(detail::encode_session_log_what(detail::SessionStatus::start), step);
  }

  // A session begins: the next add_session_start writes. Hooks call it from begin().
  void begin_session() {
    const std::lock_guard lock(mutex_);
    start_pending_ = true;
  }

  // SessionLog CHECKPOINT at `step`, naming the checkpoint as TensorFlow's CheckpointSaverHook
  // does (its save path: `<checkpoint_dir>/<basename>`, without the step).
  void add_checkpoint(std::int64_t step, std::string_view checkpoint_path) {
    const std::lock_guard lock(mutex_);
    add_event_locked(detail::encode_session_log_what(detail::SessionStatus::checkpoint, checkpoint_path),
                     step);
  }

  // Hands buffered records to the operating system, where TensorBoard can read them.
  void flush() {
    const std::lock_guard lock(mutex_);
    require_open();
    if (error_) {
      return;
    }
    errno = 0;
    if (std::fflush(file_.get()) != 0) {
      report_io_error("cannot write");
    }
  }

  // Flushes and closes the file; later writes throw. Calling it again does nothing. A failure
  // is reported as a write failure is: see error().
  void close() {
    const std::lock_guard lock(mutex_);
    if (file_ == nullptr) {
      return;
    }
    errno = 0;
    // After a failure the stdio buffer may still hold records that will fail again.
    if (std::fclose(file_.release()) != 0 && !error_) {
      report_io_error("cannot close");
    }
  }

  // The first failure to write, flush or close (errno's code), or an empty code while every
  // record reached the operating system.
  [[nodiscard]] std::error_code error() const {
    const std::lock_guard lock(mutex_);
    return error_;
  }

  // The event file being written, as TensorFlow's `EventsWriter::FileName()`.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  void open_new_file(const std::filesystem::path& logdir, std::chrono::system_clock::time_point now) {
    const auto seconds = std::chrono::floor<std::chrono::seconds>(now.time_since_epoch()).count();
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(seconds));
    const std::string base = "events.out.tfevents." + std::string(stamp) + "." + detail::host_name();

    // "x" (C11, adopted by C++17) creates the file exclusively, so a collision is detected
    // by the call that would lose data, not by an earlier exists() that could race.
    for (unsigned suffix = 0;; ++suffix) {
      path_ = logdir / (suffix == 0 ? base : base + "." + std::to_string(suffix));
      errno = 0;
      file_.reset(std::fopen(path_.string().c_str(), "wbx"));
      if (file_ != nullptr) {
        return;
      }
      const int error = errno;
      std::error_code ignored;
      if (!std::filesystem::exists(path_, ignored) || suffix >= 1000) {
        throw std::system_error(error != 0 ? error : EIO, std::generic_category(),
                    "runhooks::EventFileWriter: cannot create " + path_.string());
      }
    }
  }

  // The helpers below expect mutex_ held (the constructor needs none: no one else sees it yet).
  void add_event_locked(std::string_view what, std::int64_t step) {
    require_open();
    std::string event;
    detail::put_event_header(event, detail::to_wall_time(wall_clock_()), step);
    event.append(what);
    write_record(event);
  }

  void write_record(std::string_view event) {
    if (error_) {
      return;
    }
    const std::string record = detail::frame_record(event);
    errno = 0;
    if (std::fwrite(record.data(), 1, record.size(), file_.get()) != record.size()) {
      report_io_error("cannot write");
    }
  }

  void require_open() const {
    if (file_ == nullptr) {
      throw std::system_error(std::make_error_code(std::errc::bad_file_descriptor),
                  "runhooks::EventFileWriter: already closed: " + path_.string());
    }
  }

  // Remembers the first failure and logs it once. Reads errno, so call it right after the
  // failed call; stdio may leave errno unset, which is reported as EIO.
  void report_io_error(const char* what) {
    error_ = std::error_code(errno != 0 ? errno : EIO, std::generic_category());
    log(Severity::warning, std::string("runhooks::EventFileWriter: ") + what + " " +
                               path_.string() + ": " + error_.message() +
                               "; later events are dropped.");
  }

  void close_without_throwing() noexcept {
    try {
      close();
    } catch (...) {  // the log sink threw, or out of memory: nothing more can be said
    }
  }

  WallClock wall_clock_;
  std::filesystem::path path_;
  std::unique_ptr<std::FILE, detail::FileCloser> file_;
  std::error_code error_;
  bool start_pending_ = true;
  mutable std::mutex mutex_;
};

// TensorFlow's FileWriterCache: one EventFileWriter per log directory per process, shared by
// every hook and output that writes there (StepCounterHook's SummaryOutput, SummarySaverHook,
// CheckpointSaverHook's SessionLog CHECKPOINT), so that a run's directory holds one event file
// and TensorBoard shows all of it. A directory is known by its absolute path with symlinks
// resolved. The file closes when the last holder releases its pointer; the next get() for that
// directory then makes a new file. Thread-safe. get() is meant for construction and begin(),
// never the per-step path: it takes a process-wide mutex and resolves the path.
//
// Differs from TensorFlow: TF keeps its writers until FileWriterCache.clear(); and it keys them by
// the directory's spelling, so "logs" and "./logs" get two files.
class EventFileWriterCache {
 public:
  // The writer of `logdir`, made (with the directory) if no one holds one. A directory or file
  // that cannot be created is a std::system_error naming it, as EventFileWriter's constructor.
  static std::shared_ptr<EventFileWriter> get(const std::filesystem::path& logdir) {
    detail::create_logdir(logdir);
    const std::string key = detail::logdir_key(logdir);
    Registry& registry = instance();
    const std::lock_guard lock(registry.mutex);
    std::erase_if(registry.writers, [](const auto& entry) { return entry.second.expired(); });
    if (auto found = registry.writers[key].lock()) return found;
    auto writer = std::make_shared<EventFileWriter>(logdir);
    registry.writers[key] = writer;
    return writer;
  }

 private:
  struct Registry {
    std::mutex mutex;
    std::map<std::string, std::weak_ptr<EventFileWriter>> writers;
  };
  // Never destroyed: a hook in a static object may call get() while statics are torn down.
  static Registry& instance() {
    static Registry* const registry = new Registry;
    return *registry;
  }
};

}  // namespace runhooks
