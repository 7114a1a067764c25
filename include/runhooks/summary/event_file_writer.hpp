// Defines `runhooks::EventFileWriter`, which appends scalar summaries and session logs to a
// TensorFlow event file that TensorBoard reads: the file, its background writer and its I/O rule.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/detail/checked.hpp>
#include <runhooks/log.hpp>
#include <runhooks/summary/detail/event_encoding.hpp>
#include <runhooks/summary/detail/record_framing.hpp>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#if __has_include(<unistd.h>)
#include <unistd.h>
#endif

namespace runhooks {

class EventFileWriterCache;

namespace detail {

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

inline void create_logdir(const std::filesystem::path& logdir) {
  if (std::error_code error; !std::filesystem::create_directories(logdir, error) && error)
    throw std::system_error(error, "runhooks::EventFileWriter: cannot create the directory " +
                                       logdir.string());
}

}  // namespace detail

// How an EventFileWriter hands its records to the file.
struct EventFileWriterOptions {
  // The longest a record waits in memory before it is written to the file, where TensorBoard
  // sees it; also the most summaries, in seconds, that a killed process loses. A background
  // thread writes the waiting records every flush_secs (sooner when 64 KiB wait). 0: every
  // record is written at once by the thread that makes it, one write system call each (what
  // runhooks did before issue 21). TensorFlow's FileWriter waits 120 s; 2 s is below
  // TensorBoard's reload period (5 s), so a point shows at its next reload but one, and costs
  // one write system call per 2 s.
  double flush_secs = 2.0;

  // At least 0 and at most 1e9: std::invalid_argument naming the option and the value, or a
  // compile error when the options are constexpr.
  constexpr const EventFileWriterOptions& validate() const {
    detail::checked_secs("EventFileWriterOptions::flush_secs", flush_secs, 0.0);
    return *this;
  }
};

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
//   "runhooks"}}`, is written at once, as TensorFlow 2.x's writer does.
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
// - Every string in the file is UTF-8, whatever the input, since protobuf's parsers refuse an
//   event holding any other `string` and TensorBoard then reads nothing after it: a tag that is
//   not UTF-8 is refused (std::invalid_argument naming it; nothing is written), as a name the
//   program chose; a checkpoint path is written with each stray byte as `\xNN` (Python's
//   "backslashreplace": `caf\xe9`), as a name the file system chose. The other strings are
//   runhooks' constants.
// - When records reach the file: each is encoded into a buffer in memory by the thread that
//   adds it. A background thread (one per writer) writes the buffer, with one write system
//   call, every `flush_secs` seconds (EventFileWriterOptions; 2 s by default), and as soon as
//   64 KiB wait (`flush_bytes`). `flush()`, `close()` and the destructor write it at once, on
//   the calling thread. So a record is in the file at most about flush_secs after it was
//   added (plus the time of the write), and a process that is killed (SIGKILL, a crash, the
//   machine's power) loses at most the records of its last flush_secs; the file then ends
//   with whole records, or with part of one, which TensorBoard reads as the end of the file.
//   With flush_secs = 0 there is no thread and each record is written at once. If the thread
//   falls behind (a slow disk) until 1 MiB waits (`max_pending_bytes`), the adding thread
//   writes. After fork(), a child's copy of its parent's writer has no thread: there, records
//   reach the file by flush(), close() or max_pending_bytes.
// - I/O failures, the rule of every file output (CsvOutput's too): a directory or file that
//   cannot be created is a `std::system_error` from the constructor naming the path (the
//   directory too). A failure to write or close (disk full, file size limit), on whichever
//   thread it happens, never throws and is never silent: the first one logs one warning
//   through runhooks::log with the path and the cause (from the background thread when it
//   happened there), every later record is dropped, and `error()` tells what happened, to
//   every thread from then on. The file then holds the records written before the failure,
//   perhaps followed by part of one, which TensorBoard reads as the end of the file. A failure
//   to write the records waiting when close() is called is logged as "cannot close".
// - A write or `flush` after `close()` is a mistake in the caller and throws
//   `std::system_error` (`errc::bad_file_descriptor`). A writer from EventFileWriterCache is
//   shared: release the pointer rather than close() it, which closes it for every holder.
// - Thread-safe: any member but moving may be called from several threads at once; each record
//   is written whole, in the order the calls take the writer's mutex.
//
// Cost: an `add_scalar` takes an uncontended mutex, reads the wall clock once and encodes a
// record of about 50 bytes into the buffer: no allocation once the buffer has grown, no system
// call, no CRC (the records' CRCs are computed by the thread that writes them). The background
// thread wakes every flush_secs, idle or not. bench/summary_record.cpp measures it against a
// write per record. Nothing is done on steps where the caller writes nothing.
//
// Differs from TensorFlow: TF's `FileWriter` queues events for a background thread that writes
// them to a buffered file flushed every 120 s; this one encodes on the calling thread and
// queues bytes, flushed every 2 s by default. A write failure is logged and remembered rather
// than raised, so that a full disk loses the summaries but not the training run. And where two
// writers pick the same name, TF's C++ `EventsWriter` truncates the first file; this one adds a
// suffix.
class EventFileWriter {
 public:
  // Where wall times come from; injectable so tests can pin the times and the file name.
  // An empty one means `std::chrono::system_clock::now`.
  using WallClock = std::function<std::chrono::system_clock::time_point()>;

  // The version TensorFlow writes in the first record (`kVersionPrefix` + `kCurrentVersion`).
  static constexpr std::string_view file_version = "brain.Event:2";

  // How the first record names this writer (TF writes "tensorflow.core.util.events_writer").
  static constexpr std::string_view source_writer = "runhooks";

  // The bytes waiting that wake the background thread before flush_secs have passed: at about
  // 50 bytes a record, one write per 1,300 records however fast they come.
  static constexpr std::size_t flush_bytes = std::size_t{64} * 1024;

  // The bytes waiting that make the adding thread write them itself: the background thread has
  // fallen behind, and memory stays bounded.
  static constexpr std::size_t max_pending_bytes = 16 * flush_bytes;

  explicit EventFileWriter(const std::filesystem::path& logdir,
                           const EventFileWriterOptions& options = {}, WallClock wall_clock = {})
      : state_(std::make_unique<State>(options.validate(), std::move(wall_clock))) {
    detail::create_logdir(logdir);
    state_->open_file(logdir);
  }

  // The default options and this wall clock. A template, so that `EventFileWriter(dir,
  // {.flush_secs = 1})` never tries to make a WallClock of the braces (clang 14 fails on it).
  template <class Now>
    requires std::is_invocable_r_v<std::chrono::system_clock::time_point, Now&>
  EventFileWriter(const std::filesystem::path& logdir, Now wall_clock)
      : EventFileWriter(logdir, EventFileWriterOptions{}, WallClock(std::move(wall_clock))) {}

  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Moving is not thread-safe: no other thread may use either writer meanwhile. The background
  // thread moves along (it works on state kept on the heap). A moved-from writer throws
  // std::system_error from every member but error(), path(), close() and assignment.
  EventFileWriter(EventFileWriter&& other) noexcept = default;

  EventFileWriter& operator=(EventFileWriter&& other) noexcept {
    if (this != &other) {
      close_without_throwing();
      state_ = std::move(other.state_);
    }
    return *this;
  }

  ~EventFileWriter() { close_without_throwing(); }

  // Appends one scalar at `step`, stamped with the current wall time. A tag that is not UTF-8
  // is std::invalid_argument naming it (escaped), and nothing is written.
  void add_scalar(std::string_view tag, float value, std::int64_t step) {
    detail::check_summary_tag("EventFileWriter::add_scalar", tag);
    State& s = state();
    bool write_now = false;
    {
      const std::lock_guard lock(s.mutex);
      s.require_open();
      write_now = s.append_locked([&](std::string& out) {
        detail::put_scalar_event(out, detail::to_wall_time(s.wall_clock()), step, tag, value);
      });
    }
    if (write_now) s.write_pending("cannot write");
  }

  // Appends Event{wall_time, step, <what>}, where `what` is one encoded field of the event's
  // `what` oneof, tag and length included: a Summary holding histograms, a SessionLog
  // (SummaryEncoder, <runhooks/summary/summary_encoder.hpp>, and
  // detail::encode_session_log_what encode them). Same rules as add_scalar. The bytes are
  // written as given: the encoders that make them keep their strings UTF-8.
  void add_event(std::string_view what, std::int64_t step) {
    State& s = state();
    bool write_now = false;
    {
      const std::lock_guard lock(s.mutex);
      s.require_open();
      write_now = s.append_event_locked(what, step);
    }
    if (write_now) s.write_pending("cannot write");
  }

  // SessionLog START at `step`, unless this session has one already (see the class comment).
  void add_session_start(std::int64_t step) {
    State& s = state();
    bool write_now = false;
    {
      const std::lock_guard lock(s.mutex);
      s.require_open();
      if (!s.start_pending) return;
      s.start_pending = false;
      write_now = s.append_event_locked(
          detail::encode_session_log_what(detail::SessionStatus::start), step);
    }
    if (write_now) s.write_pending("cannot write");
  }

  // A session begins: the next add_session_start writes. Hooks call it from begin().
  void begin_session() {
    State& s = state();
    const std::lock_guard lock(s.mutex);
    s.start_pending = true;
  }

  // SessionLog CHECKPOINT at `step`, naming the checkpoint as TensorFlow's CheckpointSaverHook
  // does (its save path: `<checkpoint_dir>/<basename>`, without the step). A path that is not
  // UTF-8 is written with its stray bytes as `\xNN` (detail::encode_session_log_what).
  void add_checkpoint(std::int64_t step, std::string_view checkpoint_path) {
    add_event(detail::encode_session_log_what(detail::SessionStatus::checkpoint, checkpoint_path),
              step);
  }

  // Writes the records waiting to the file, where TensorBoard can read them, before it returns.
  void flush() {
    State& s = state();
    {
      const std::lock_guard lock(s.mutex);
      s.require_open();
    }
    s.write_pending("cannot write");
  }

  // Stops the background thread, writes the records waiting and closes the file; later writes
  // throw. Calling it again does nothing. A failure is reported as a write failure is (see
  // error()), as "cannot close".
  void close() {
    if (state_) state_->close();
  }

  // The first failure to write or close (errno's code), wherever it happened, or an empty code
  // while every record written reached the operating system.
  [[nodiscard]] std::error_code error() const {
    if (!state_) return {};
    const std::lock_guard lock(state_->mutex);
    return state_->error;
  }

  // The event file being written, as TensorFlow's `EventsWriter::FileName()`.
  [[nodiscard]] const std::filesystem::path& path() const noexcept {
    static const std::filesystem::path moved_from;
    return state_ ? state_->path : moved_from;
  }

  // The longest a record waits in memory (EventFileWriterOptions::flush_secs, or the shorter one
  // an EventFileWriterCache::get() asked for).
  [[nodiscard]] double flush_secs() const {
    const State& s = state();
    const std::lock_guard lock(s.mutex);
    return std::chrono::duration<double>(s.period).count();
  }

 private:
  friend class EventFileWriterCache;

  using Period = std::chrono::steady_clock::duration;

  static Period to_period(double secs) {
    return std::chrono::duration_cast<Period>(std::chrono::duration<double>(secs));
  }

  // Everything the background thread shares with the writer, on the heap so that moving the
  // writer moves none of it. Three mutexes, always taken in this order: close_mutex (close()
  // alone), io_mutex (the file and the buffer being written), mutex (the rest). The adding
  // thread takes `mutex` alone, so it never waits for a write unless it writes itself.
  struct State {
    State(const EventFileWriterOptions& options, WallClock clock)
        : wall_clock(clock ? std::move(clock)
                           : WallClock([] { return std::chrono::system_clock::now(); })),
          period(to_period(options.flush_secs)) {}

    State(const State&) = delete;
    State& operator=(const State&) = delete;

    // The writer's close() has stopped the thread; this is for a close() that threw first.
    ~State() {
      if (!flusher) return;
      {
        const std::lock_guard lock(mutex);
        stop = true;
      }
      wake.notify_all();
      stop_flusher();
    }

    // Creates the file, writes its first record, and starts the background thread.
    void open_file(const std::filesystem::path& logdir) {
      const auto now = wall_clock();
      create_file(logdir, now);
      // Unbuffered: the writer's buffer is the only one, so a write() is a write() and a flush
      // has nothing to add.
      std::setvbuf(file.get(), nullptr, _IONBF, 0);
      const std::size_t at = detail::begin_record(pending);
      pending.append(detail::encode_file_version_event(detail::to_wall_time(now), file_version,
                                                       source_writer));
      detail::end_record(pending, at);
      open = true;
      write_pending("cannot write");
      if (period > Period::zero()) {
        flusher = std::make_unique<std::thread>([this] { run_flusher(); });
#if __has_include(<unistd.h>)
        flusher_pid = ::getpid();
#endif
      }
    }

    void create_file(const std::filesystem::path& logdir, std::chrono::system_clock::time_point now) {
      const auto seconds = std::chrono::floor<std::chrono::seconds>(now.time_since_epoch()).count();
      char stamp[32];
      std::snprintf(stamp, sizeof stamp, "%010lld", static_cast<long long>(seconds));
      const std::string base = "events.out.tfevents." + std::string(stamp) + "." + detail::host_name();

      // "x" (C11, adopted by C++17) creates the file exclusively, so a collision is detected
      // by the call that would lose data, not by an earlier exists() that could race.
      for (unsigned suffix = 0;; ++suffix) {
        path = logdir / (suffix == 0 ? base : base + "." + std::to_string(suffix));
        errno = 0;
        file.reset(std::fopen(path.string().c_str(), "wbx"));
        if (file != nullptr) {
          return;
        }
        const int error_number = errno;
        std::error_code ignored;
        if (!std::filesystem::exists(path, ignored) || suffix >= 1000) {
          throw std::system_error(error_number != 0 ? error_number : EIO, std::generic_category(),
                                  "runhooks::EventFileWriter: cannot create " + path.string());
        }
      }
    }

    // The helpers below up to write_pending expect `mutex` held.
    void require_open() const {
      if (!open) {
        throw std::system_error(std::make_error_code(std::errc::bad_file_descriptor),
                                "runhooks::EventFileWriter: already closed: " + path.string());
      }
    }

    // Appends one record, whose data `encode(pending)` appends; true when the caller must
    // write it at once (write_pending, once `mutex` is released). After a failure, drops it.
    template <class Encode>
    bool append_locked(Encode&& encode) {
      if (error) return false;
      const std::size_t at = detail::begin_record(pending);
      try {
        encode(pending);
      } catch (...) {  // the wall clock threw, or out of memory: no half record stays behind
        pending.resize(at);
        throw;
      }
      detail::end_record(pending, at);
      if (period == Period::zero() || pending.size() >= max_pending_bytes) return true;
      if (pending.size() >= flush_bytes && !flush_requested) {
        flush_requested = true;
        wake.notify_one();
      }
      return false;
    }

    bool append_event_locked(std::string_view what, std::int64_t step) {
      return append_locked([&](std::string& out) {
        detail::put_event_header(out, detail::to_wall_time(wall_clock()), step);
        out.append(what);
      });
    }

    // Writes the records waiting, with one write, on the calling thread; `what` names the
    // failure in the log line. Takes io_mutex then mutex: call it with neither held.
    void write_pending(const char* what) {
      const std::lock_guard io(io_mutex);
      {
        const std::lock_guard lock(mutex);
        flush_requested = false;
        if (error || pending.empty() || file == nullptr) return;
        pending.swap(writing);
      }
      detail::seal_records(writing);
      errno = 0;
      const bool written =
          std::fwrite(writing.data(), 1, writing.size(), file.get()) == writing.size();
      const int error_number = errno;
      writing.clear();
      if (!written) report(what, error_number);
    }

    // Remembers the first failure and logs it once; the records waiting are dropped with it.
    // `error_number` is errno right after the failed call; stdio may leave it unset: EIO.
    void report(const char* what, int error_number) {
      const std::error_code code(error_number != 0 ? error_number : EIO, std::generic_category());
      {
        const std::lock_guard lock(mutex);
        if (error) return;
        error = code;
        pending.clear();
      }
      log(Severity::warning, std::string("runhooks::EventFileWriter: ") + what + " " +
                                 path.string() + ": " + code.message() +
                                 "; later events are dropped.");
    }

    // The background thread: writes what waits every `period`, and when flush_bytes wait.
    // Ends at close(), or when the period becomes 0 (EventFileWriterCache::get).
    void run_flusher() noexcept {
      std::unique_lock lock(mutex);
      auto last = std::chrono::steady_clock::now();
      while (!stop && period > Period::zero()) {
        const auto deadline = last + period;
        if (!flush_requested && std::chrono::steady_clock::now() < deadline) {
          wake.wait_until(lock, deadline);
          continue;
        }
        last = std::chrono::steady_clock::now();
        if (pending.empty() || error) {
          flush_requested = false;
          continue;
        }
        lock.unlock();
        try {
          write_pending("cannot write");
        } catch (...) {  // the log sink threw, or out of memory: the failure is in `error` already
        }
        lock.lock();
      }
    }

    void shorten_period(Period shorter) {
      {
        const std::lock_guard lock(mutex);
        if (shorter >= period) return;
        period = shorter;
      }
      wake.notify_all();
    }

    void close() {
      const std::lock_guard closing(close_mutex);
      {
        const std::lock_guard lock(mutex);
        if (!open) return;
        open = false;
        stop = true;
      }
      wake.notify_all();
      stop_flusher();
      write_pending("cannot close");
      const std::lock_guard io(io_mutex);
      errno = 0;
      if (std::fclose(file.release()) != 0) report("cannot close", errno);
    }

    void stop_flusher() {
      if (!flusher) return;
#if __has_include(<unistd.h>)
      if (::getpid() != flusher_pid) {  // a forked child: the thread is the parent's
        static_cast<void>(flusher.release());
        return;
      }
#endif
      flusher->join();
      flusher.reset();
    }

    WallClock wall_clock;          // set before the writer is shared, called under `mutex`
    std::filesystem::path path;    // set before the writer is shared

    mutable std::mutex mutex;
    std::condition_variable wake;  // with `mutex`: the background thread's sleep
    std::string pending;           // records waiting, their CRCs not yet computed
    std::error_code error;
    Period period;
    bool open = false;
    bool start_pending = true;
    bool stop = false;
    bool flush_requested = false;  // flush_bytes wait: the background thread writes now

    std::mutex io_mutex;
    std::unique_ptr<std::FILE, detail::FileCloser> file;
    std::string writing;  // records being written; kept to reuse its memory

    std::mutex close_mutex;
    std::unique_ptr<std::thread> flusher;
    long flusher_pid = 0;
  };

  State& state() const {
    if (!state_) {
      throw std::system_error(std::make_error_code(std::errc::bad_file_descriptor),
                              "runhooks::EventFileWriter: used after it was moved from");
    }
    return *state_;
  }

  void close_without_throwing() noexcept {
    try {
      close();
    } catch (...) {  // the log sink threw, or out of memory: nothing more can be said
    }
  }

  std::unique_ptr<State> state_;
};

}  // namespace runhooks
