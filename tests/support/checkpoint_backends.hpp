// Shared devices for the checkpoint tests: checkpointable fakes, a snapshot whose write a test can
// hold or fail, TensorFlow's MockCheckpointSaverListener, temporary directories and file helpers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <stdlib.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/log.hpp>

#include <support/fakes.hpp>

namespace ckpt {

namespace fs = std::filesystem;

// A directory under $TMPDIR (or /tmp), removed with everything in it at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                        "/runhooks-test-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path operator/(std::string_view name) const { return path / name; }
  std::string str() const { return path.string(); }
};

// Every file name in `dir`, sorted.
// The directory's files, without the writer's lock file (detail/directory_lock.hpp), which every
// directory a CheckpointManager opened keeps.
inline std::vector<std::string> files_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename() != ".runhooks-lock") names.insert(entry.path().filename().string());
  return {names.begin(), names.end()};
}

// files_in without the event files: CheckpointSaverHook writes a SessionLog CHECKPOINT per save to
// checkpoint_dir's events.out.tfevents.* file, as TensorFlow's hook does.
inline std::vector<std::string> files_in_but_events(const fs::path& dir) {
  std::vector<std::string> names = files_in(dir);
  std::erase_if(names, [](const std::string& name) { return name.rfind("events.out.tfevents.", 0) == 0; });
  return names;
}

inline void put_text(const fs::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

// A CheckpointManager::save writer: <prefix>.arrays holding `step`, as CheckpointedBackend does.
inline auto arrays_writer(std::int64_t step) {
  return [step](const fs::path& prefix) {
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", step);
    out.close();
  };
}

inline std::string read_text(const fs::path& file) {
  return runhooks::detail::read_whole_file(file);
}

// The global step stored in checkpoint `prefix` by CheckpointedBackend.
inline std::int64_t step_in(const fs::path& prefix) {
  return runhooks::FlatArrayReader(prefix.string() + ".arrays").scalar<std::int64_t>("global_step");
}

// TF's checkpoint_utils.load_variable(model_dir, global_step): the step in the latest checkpoint.
inline std::int64_t latest_step(const fs::path& dir) {
  const std::optional<fs::path> latest = runhooks::latest_checkpoint(dir);
  if (!latest) throw std::runtime_error("no checkpoint in " + dir.string());
  return step_in(*latest);
}

// The checkpoints the state file of `dir` names, by file name, oldest first.
inline std::vector<std::string> named_checkpoints(const fs::path& dir) {
  std::vector<std::string> names;
  if (const auto state = runhooks::read_checkpoint_state(dir))
    for (const std::string& path : state->all_model_checkpoint_paths) names.push_back(path);
  return names;
}

// fakes::FakeBackend (a global step, feeds and fetches after TensorFlow's tests) whose global
// step and `var` are checkpointed in <prefix>.arrays. Counts its saves and restores; a save can be
// made to fail.
struct CheckpointedBackend : fakes::FakeBackend {
  std::shared_ptr<int> saves = std::make_shared<int>(0);
  std::shared_ptr<int> restores = std::make_shared<int>(0);
  std::optional<std::string> save_error;  // save() throws std::runtime_error(*save_error)

  void save(const fs::path& prefix) const {
    ++*saves;
    if (save_error) throw std::runtime_error(*save_error);
    runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
    out.add("global_step", step);
    out.add("var", var);
    out.close();
  }
  void restore(const fs::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    const auto restored_step = in.scalar<std::int64_t>("global_step");
    var = in.scalar<double>("var");
    step = restored_step;
    ++*restores;
  }
};

// Controls the writes of SnapshotBackend's snapshots from the test: hold them until released,
// make them fail, count them.
struct WriteGate {
  std::mutex mutex;
  std::condition_variable changed;
  bool held = false;
  int started = 0;
  int finished = 0;
  std::optional<std::string> error;  // the next write throws this

  void hold() {
    std::lock_guard lock(mutex);
    held = true;
  }
  void release() {
    {
      std::lock_guard lock(mutex);
      held = false;
    }
    changed.notify_all();
  }
  void wait_started(int n) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return started >= n; });
  }
  void wait_finished(int n) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return finished >= n; });
  }

  // What a snapshot's write does first: counts itself started, waits while held, then takes the
  // error set for it, if any. The returned guard counts the write finished when it goes.
  struct Finish {
    WriteGate& gate;
    ~Finish() {
      {
        std::lock_guard lock(gate.mutex);
        ++gate.finished;
      }
      gate.changed.notify_all();
    }
  };
  [[nodiscard]] std::optional<std::string> pass() {
    std::unique_lock lock(mutex);
    ++started;
    changed.notify_all();
    changed.wait(lock, [&] { return !held; });
    return std::exchange(error, std::nullopt);
  }
};

// A CheckpointedBackend that is also Snapshottable: snapshot() copies step and var, and the copy's
// write() (on the saver's thread) passes through the gate.
struct SnapshotBackend : CheckpointedBackend {
  std::shared_ptr<WriteGate> gate = std::make_shared<WriteGate>();
  std::shared_ptr<int> snapshots = std::make_shared<int>(0);

  struct Snapshot {
    std::int64_t step;
    double var;
    std::shared_ptr<WriteGate> gate;

    void write(const fs::path& prefix) const {
      const std::optional<std::string> error = gate->pass();
      const WriteGate::Finish finish{*gate};
      if (error) throw std::runtime_error(*error);
      runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
      out.add("global_step", step);
      out.add("var", var);
      out.close();
    }
  };
  Snapshot snapshot() const {
    ++*snapshots;
    return Snapshot{step, var, gate};
  }
};

// A CheckpointedBackend that fills the snapshot the hook keeps (SnapshottableInPlace), and has
// the by-value snapshot() as well, which the hook must not use. Records which Snapshot object
// each snapshot(into) filled, and what it held before (the step of the previous fill, or -1 for a
// new one). The write passes through the gate.
struct InPlaceBackend : CheckpointedBackend {
  struct Snapshot {
    std::int64_t step = -1;
    std::vector<double> vars;  // `var`, repeated: a buffer whose memory is reused
    std::shared_ptr<WriteGate> gate;

    void write(const fs::path& prefix) const {
      const std::optional<std::string> error = gate->pass();
      const WriteGate::Finish finish{*gate};
      if (error) throw std::runtime_error(*error);
      runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
      out.add("global_step", step);
      out.add("var", vars.at(0));
      out.close();
    }
  };
  struct Fill {
    const Snapshot* into;
    std::int64_t held_step;      // what `into` held before
    const double* held_data;     // where its buffer was before (nullptr: none yet)
    const double* data;          // and after
  };
  std::shared_ptr<WriteGate> gate = std::make_shared<WriteGate>();
  std::shared_ptr<std::vector<Fill>> fills = std::make_shared<std::vector<Fill>>();
  std::shared_ptr<int> by_value = std::make_shared<int>(0);

  void snapshot(Snapshot& into) const {
    const Fill before{&into, into.step, into.vars.empty() ? nullptr : into.vars.data(), nullptr};
    into.step = step;
    into.vars.assign(256, var);
    into.gate = gate;
    fills->push_back(before);
    fills->back().data = into.vars.data();
  }
  Snapshot snapshot() const {
    ++*by_value;
    Snapshot made;
    made.step = step;
    made.vars.assign(256, var);
    made.gate = gate;
    return made;
  }
};

// TensorFlow's MockCheckpointSaverListener: counts each point; after_save returns ask_for_stop.
struct ListenerCounts {
  int begin = 0, before_save = 0, after_save = 0, end = 0;
  std::vector<std::int64_t> before_steps{}, after_steps{};
  bool ask_for_stop = false;
  bool operator==(const ListenerCounts& o) const {
    return begin == o.begin && before_save == o.before_save && after_save == o.after_save &&
           end == o.end;
  }
};
struct MockListener {
  std::shared_ptr<ListenerCounts> counts = std::make_shared<ListenerCounts>();
  void begin() { ++counts->begin; }
  template <class Session>
  void before_save(Session&, std::int64_t step) {
    ++counts->before_save;
    counts->before_steps.push_back(step);
  }
  template <class Session>
  bool after_save(Session&, std::int64_t step) {
    ++counts->after_save;
    counts->after_steps.push_back(step);
    return counts->ask_for_stop;
  }
  template <class Session>
  void end(Session&, std::int64_t) {
    ++counts->end;
  }
};

// Holds every checkpoint file operation (durable_files.hpp's gate) made on a thread other than
// the one that made the gate, such as CheckpointManager's background deleter, until release(),
// or refuses them (refuse_others(): each fails as a simulated kill does); that thread's own
// operations go through, and are counted while others are held.
class OtherThreadsGate {
 public:
  OtherThreadsGate() {
    std::lock_guard lock(state().mutex);
    state().held = true;
    state().refuse = false;
    state().owner = std::this_thread::get_id();
    state().waiting = state().owner_while_held = 0;
    runhooks::detail::file_operation_gate() = &pass;
  }
  OtherThreadsGate(const OtherThreadsGate&) = delete;
  OtherThreadsGate& operator=(const OtherThreadsGate&) = delete;
  ~OtherThreadsGate() {
    release();
    runhooks::detail::file_operation_gate() = nullptr;
  }
  void release() {
    {
      std::lock_guard lock(state().mutex);
      state().held = false;
    }
    state().changed.notify_all();
  }
  void refuse_others() {
    {
      std::lock_guard lock(state().mutex);
      state().refuse = true;
    }
    release();
  }
  // Waits until n operations of other threads are held.
  void wait_held(int n) {
    std::unique_lock lock(state().mutex);
    state().changed.wait(lock, [&] { return state().waiting >= n; });
  }
  // The owner's operations while another thread's was held: 0 when the owner waited for it.
  int owner_while_held() const {
    std::lock_guard lock(state().mutex);
    return state().owner_while_held;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool held = false;
    bool refuse = false;
    std::thread::id owner;
    int waiting = 0;
    int owner_while_held = 0;
  };
  static State& state() {
    static State s;
    return s;
  }
  static bool pass() noexcept {
    std::unique_lock lock(state().mutex);
    if (std::this_thread::get_id() == state().owner) {
      if (state().held && state().waiting > 0) ++state().owner_while_held;
      return true;
    }
    ++state().waiting;
    state().changed.notify_all();
    state().changed.wait(lock, [] { return !state().held; });
    return !state().refuse;
  }
};

// Keeps the library's log lines for the test to read, and out of the test's output.
struct CapturedLog {
  static std::vector<std::string>& lines() {
    static std::vector<std::string> kept;
    return kept;
  }
  static inline std::mutex mutex;
  runhooks::LogSink previous;
  CapturedLog() {
    std::lock_guard lock(mutex);
    lines().clear();
    previous = runhooks::set_log_sink([](runhooks::Severity, std::string_view line) {
      std::lock_guard inner(mutex);
      lines().emplace_back(line);
    });
  }
  ~CapturedLog() { runhooks::set_log_sink(previous); }
  bool contains(std::string_view text) const { return count(text) > 0; }
  int count(std::string_view text) const {
    std::lock_guard lock(mutex);
    int n = 0;
    for (const std::string& line : lines()) n += line.find(text) != std::string::npos;
    return n;
  }
};

}  // namespace ckpt
