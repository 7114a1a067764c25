// A synchronous checkpoint of 64 MiB against the floor of a durable write of the same bytes to
// the same directory, side by side in one run:
//   write+fsync          what `dd if=/dev/zero of=DIR/x bs=1M count=64 conv=fsync` does, in
//                        this process: 1 MiB write()s from a buffer, fsync, close
//   write+fsync, array   the same from the 64 MiB array (read from memory, as a save reads it)
//   dd                   that command itself (its fork and exec included, ~1 ms)
//   FlatArrayWriter      the writer alone (version 2, CRC-32C), then fsync of the file
//   sync save            CheckpointSaverHook's synchronous save: the step of a MonitoredSession
//                        that saves, i.e. the backend's FlatArrayWriter under a staging name,
//                        fsync, hard link, directory fsync, the state file (temporary, fsync,
//                        rename, directory fsync); the checkpoint that retention drops is deleted
//                        on a thread of its own after the step (not timed; waited for before the
//                        next contestant)
//   manager, delete now  the same save through CheckpointManager::save with DeleteDropped::now:
//                        the dropped checkpoint's unlink inside the timed save, as the hook's
//                        synchronous save did before
//   manager, background  CheckpointManager::save with DeleteDropped::in_background (the hook's
//                        way), without the session around it
//   sync save, v1        the same with format version 1's writer (Boost.CRC's CRC-32 over the
//                        whole array, then one write): what runhooks did before
//   torch.save           with --torch-python PY: torch.save of a 64 MiB float32 tensor to a
//                        temporary file, fsync, rename (timed inside that Python process)
// and, in memory, the two checksums over the array: CRC-32C (the CPU's instruction, three
// streams) and Boost.CRC's CRC-32.
//
// Rounds interleave the contestants (in a new random order every round) and every contestant's
// files go to one directory ($TMPDIR, or /tmp, or --dir). Before each timed operation on disk
// the directory's file system is flushed (syncfs) and left idle for --settle-ms (default 200),
// as the training steps between two saves leave it: a disk that trims freed blocks (ext4's
// `discard`, a thin-provisioned virtual disk) is still busy with the previous contestant's
// deleted file for a while after syncfs returns, and a fixed order would bill that to whoever
// comes next. Every contestant replaces its previous output, as a training run does (dd and
// write+fsync truncate it, torch.save renames over it, a save deletes the checkpoint that
// retention drops), so each pays for freeing 64 MiB. Reported: each one's median over rounds,
// its quartiles, and the medians of its per-round ratios to write+fsync, to dd and to torch.save
// of the same round.
//
//   bench_checkpoint_write [--rounds N] [--mib N] [--dir DIR] [--settle-ms N]
//                          [--torch-python PY] [--only TEXT] [--smoke]
//   bench_checkpoint_write --save-once DIR [--mib N]
// --only TEXT: only the contestants whose name contains TEXT, and write+fsync (for strace or
// perf record of one of them).
// --smoke: 2 rounds of 2 MiB, for the test suite: checks the files read back, no numbers.
// --save-once: one process, one synchronous save into DIR (kept between runs, so that retention
// deletes a previous checkpoint as in training): a whole command to time against dd from
// outside, e.g. with /usr/bin/time or hyperfine. It also pays for starting, for allocating and
// filling the array, and for opening the directory.
#include <runhooks/checkpoint/checkpoint_saver_hook.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>
#include <runhooks/checkpoint/flat_arrays.hpp>
#include <runhooks/detail/crc32c.hpp>
#include <runhooks/log.hpp>
#include <runhooks/monitored_session.hpp>

#include <boost/crc.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_checkpoint_write: %s\n", what.c_str());
  std::exit(1);
}

// Format version 1's writer, as runhooks had it: the whole array's CRC-32 first, then the
// record and the data in one write.
class VersionOneWriter {
 public:
  explicit VersionOneWriter(const fs::path& file)
      : fd_(runhooks::detail::FileDescriptor::create(file)) {
    const std::uint32_t version = 1, order = 0x01020304u;
    fd_.write_all("RHARRAYS", 8);
    fd_.write_all(&version, 4);
    fd_.write_all(&order, 4);
  }
  template <class T>
  void add(std::string_view name, const std::vector<T>& values) {
    runhooks::detail::FlatArrayRecord record{
        .record = runhooks::detail::flat_arrays_record,
        .name_size = static_cast<std::uint32_t>(name.size()),
        .type = runhooks::detail::element_type_code<T>(),
        .element_size = sizeof(T),
        .count = values.size(),
        .data_crc = crc32(values.data(), values.size() * sizeof(T)),
        .header_crc = 0,
    };
    boost::crc_32_type header;
    header.process_bytes(&record, sizeof record);
    header.process_bytes(name.data(), name.size());
    record.header_crc = header.checksum();
    records_crc_.process_bytes(&record.header_crc, 4);
    fd_.write_all(&record, sizeof record);
    fd_.write_all(name.data(), name.size());
    fd_.write_all(values.data(), values.size() * sizeof(T));
    ++arrays_;
  }
  void close() {
    runhooks::detail::FlatArrayTrailer trailer{};
    std::memcpy(trailer.magic, runhooks::detail::flat_arrays_end, 8);
    trailer.arrays = arrays_;
    trailer.records_crc = records_crc_.checksum();
    fd_.write_all(&trailer, sizeof trailer);
    fd_.close();
  }
  static std::uint32_t crc32(const void* data, std::size_t size) {
    boost::crc_32_type crc;
    crc.process_bytes(data, size);
    return crc.checksum();
  }

 private:
  runhooks::detail::FileDescriptor fd_;
  boost::crc_32_type records_crc_;
  std::uint64_t arrays_ = 0;
};

// A backend of one large float array; save() writes it as it is (no copy), with either writer.
template <bool version_one>
struct BigBackend {
  std::shared_ptr<const std::vector<float>> parameters;
  std::int64_t step = 0;

  void run() { ++step; }
  std::int64_t global_step() const { return step; }
  void save(const fs::path& prefix) const {
    if constexpr (version_one) {
      VersionOneWriter out(prefix.string() + ".arrays");
      out.add("parameters", *parameters);
      out.add("global_step", std::vector<std::int64_t>{step});
      out.close();
    } else {
      runhooks::FlatArrayWriter out(prefix.string() + ".arrays");
      out.add("parameters", *parameters);
      out.add("global_step", step);
      out.close();
    }
  }
  void restore(const fs::path& prefix) {
    const runhooks::FlatArrayReader in(prefix.string() + ".arrays");
    step = in.scalar<std::int64_t>("global_step");
  }
};

// A synchronous CheckpointSaverHook that saves on every step (retention keeps two).
auto saver_hook(const fs::path& dir) {
  fs::create_directories(dir);
  return runhooks::CheckpointSaverHook(
      {.checkpoint_dir = dir.string(), .save_steps = 1, .max_to_keep = 2});
}

// One step of `session`, which saves: the stall of a synchronous save.
template <class Session>
double timed_step(Session& session) {
  const auto start = Clock::now();
  session.run();
  return ms_since(start);
}

void syncfs_of(const fs::path& dir) {
  runhooks::detail::FileDescriptor fd = runhooks::detail::FileDescriptor::open_read(dir, true);
  if (::syncfs(fd.get()) != 0) die("syncfs of " + dir.string() + " failed");
  fd.close();
}

// `bytes` bytes in 1 MiB write()s, from `source` or, when it is null, from one 1 MiB buffer
// (dd's), then fsync.
double write_fsync(const fs::path& file, const char* source, std::size_t bytes) {
  static const std::vector<char> zeros(std::size_t{1} << 20, 0);
  const auto start = Clock::now();
  runhooks::detail::FileDescriptor fd = runhooks::detail::FileDescriptor::create(file);
  for (std::size_t done = 0; done < bytes; done += zeros.size())
    fd.write_all(source != nullptr ? source + done : zeros.data(),
                 std::min(zeros.size(), bytes - done));
  fd.sync();
  fd.close();
  return ms_since(start);
}

double flat_arrays_fsync(const fs::path& file, const std::vector<float>& parameters) {
  const auto start = Clock::now();
  runhooks::FlatArrayWriter out(file);
  out.add("parameters", parameters);
  out.add("global_step", std::int64_t{1});
  out.close();
  runhooks::detail::fsync_path(file);
  return ms_since(start);
}

// Runs a command and returns its wall time (fork and exec included), or a negative number when
// it could not run or failed.
double run_command(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const auto start = Clock::now();
  pid_t pid;
  const int error = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return -1.0;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  const double ms = ms_since(start);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ms : -1.0;
}

// A Python process holding a 64 MiB tensor: each line "PATH" on its input saves it with
// torch.save to PATH.tmp, fsyncs, renames it to PATH and answers with the milliseconds taken.
class TorchSaver {
 public:
  TorchSaver(const std::string& python, std::size_t floats) {
    const std::string script =
        "import os, sys, time, torch\n"
        "t = torch.full((" + std::to_string(floats) + ",), 0.5, dtype=torch.float32)\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    path = line.rstrip('\\n')\n"
        "    start = time.perf_counter()\n"
        "    with open(path + '.tmp', 'wb') as f:\n"
        "        torch.save({'parameters': t, 'global_step': 1}, f)\n"
        "        f.flush()\n"
        "        os.fsync(f.fileno())\n"
        "    os.rename(path + '.tmp', path)\n"
        "    print(1000.0 * (time.perf_counter() - start), flush=True)\n";
    int to_child[2], from_child[2];
    if (::pipe(to_child) != 0 || ::pipe(from_child) != 0) die("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
    posix_spawn_file_actions_addclose(&actions, to_child[1]);
    posix_spawn_file_actions_addclose(&actions, from_child[0]);
    std::string python_arg = python, dash_c = "-c", script_arg = script;
    char* argv[] = {python_arg.data(), dash_c.data(), script_arg.data(), nullptr};
    if (::posix_spawnp(&pid_, argv[0], &actions, nullptr, argv, environ) != 0)
      die("cannot start " + python);
    posix_spawn_file_actions_destroy(&actions);
    ::close(to_child[0]);
    ::close(from_child[1]);
    in_ = ::fdopen(to_child[1], "w");
    out_ = ::fdopen(from_child[0], "r");
    if (read_line() != "ready") die(python + " could not import torch");
  }
  ~TorchSaver() {
    std::fclose(in_);
    std::fclose(out_);
    int status;
    ::waitpid(pid_, &status, 0);
  }
  double save(const fs::path& file) {
    std::fprintf(in_, "%s\n", file.c_str());
    std::fflush(in_);
    return std::stod(read_line());
  }

 private:
  std::string read_line() {
    char line[256];
    if (std::fgets(line, sizeof line, out_) == nullptr) die("the torch.save process ended");
    std::string text = line;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    return text;
  }
  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5)];
}

struct Contestant {
  std::string name;
  std::function<double()> measure;  // one timed operation, in ms
  bool on_disk = true;              // flush the file system before it
  std::vector<double> ms;
};

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& base) {
    std::string templ = base + "/runhooks-bench-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) die("mkdtemp in " + base + " failed");
    path = templ;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = 11, settle_ms = 200;
  std::size_t mib = 64;
  bool smoke = false;
  std::string torch_python, save_once, only;
  const char* tmpdir = std::getenv("TMPDIR");
  std::string base = tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--rounds") rounds = std::stoi(value());
    else if (arg == "--mib") mib = std::stoul(value());
    else if (arg == "--dir") base = value();
    else if (arg == "--torch-python") torch_python = value();
    else if (arg == "--settle-ms") settle_ms = std::stoi(value());
    else if (arg == "--only") only = value();
    else if (arg == "--smoke") smoke = true;
    else if (arg == "--save-once") save_once = value();
    else
      die("unknown argument " + arg +
          " (--rounds N, --mib N, --dir DIR, --settle-ms N, --torch-python PY, --only TEXT, "
          "--smoke, --save-once DIR)");
  }
  if (smoke) rounds = 2, mib = 2, settle_ms = 0;
  if (rounds < 1 || mib < 1 || settle_ms < 0)
    die("--rounds and --mib must be at least 1, --settle-ms at least 0");
  runhooks::set_log_sink([](runhooks::Severity, std::string_view) {});

  const std::size_t bytes = mib << 20;
  auto parameters = std::make_shared<std::vector<float>>(bytes / sizeof(float));
  for (std::size_t i = 0; i < parameters->size(); ++i)
    (*parameters)[i] = static_cast<float>(i % 1000) * 0.001f;
  if (!save_once.empty()) {
    // The session saves its step on creation (TensorFlow's after_create_session), and close()
    // has nothing newer to save. The step is new in every run (milliseconds since the epoch).
    const std::int64_t step = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
    runhooks::MonitoredSession session{
        [parameters, step] { return BigBackend<false>{parameters, step}; }, saver_hook(save_once)};
    session.close();
    return 0;
  }
  TempDir dir(base);

  // Each saves step 0 on creation, then one checkpoint per step.
  runhooks::MonitoredSession session{[parameters] { return BigBackend<false>{parameters}; },
                                     saver_hook(dir.path / "v2")};
  runhooks::MonitoredSession session_v1{[parameters] { return BigBackend<true>{parameters}; },
                                        saver_hook(dir.path / "v1")};
  std::unique_ptr<TorchSaver> torch;
  if (!torch_python.empty()) torch = std::make_unique<TorchSaver>(torch_python, parameters->size());
  const bool have_dd = run_command({"dd", "if=/dev/zero", "of=" + (dir.path / "dd").string(),
                                    "bs=1M", "count=1", "conv=fsync"}) >= 0.0;

  std::uint32_t checksums = 0;  // keeps the in-memory checksums from being optimised away
  std::vector<Contestant> contestants;
  const auto add = [&](std::string name, std::function<double()> measure, bool on_disk = true) {
    if (contestants.empty() || name.find(only) != std::string::npos)
      contestants.push_back(Contestant{std::move(name), std::move(measure), on_disk, {}});
  };
  add("write+fsync (dd's work)", [&] { return write_fsync(dir.path / "plain", nullptr, bytes); });
  add("write+fsync, array", [&] {
    return write_fsync(dir.path / "array", reinterpret_cast<const char*>(parameters->data()),
                       bytes);
  });
  if (have_dd)
    add("dd bs=1M conv=fsync", [&] {
      return run_command({"dd", "if=/dev/zero", "of=" + (dir.path / "dd").string(), "bs=1M",
                          "count=" + std::to_string(mib), "conv=fsync"});
    });
  add("FlatArrayWriter+fsync",
      [&] { return flat_arrays_fsync(dir.path / "alone.arrays", *parameters); });
  add("sync save (CRC-32C, v2)", [&] {
    const double ms = timed_step(session);
    while (session.hook<0>().manager().deleting()) std::this_thread::yield();
    return ms;
  });
  // The same writer straight through a manager, the dropped checkpoint deleted in the save or not.
  std::int64_t manager_step = 0;
  auto manager_save = [&, writer = BigBackend<false>{parameters}](
                                runhooks::CheckpointManager& manager,
                                runhooks::DeleteDropped deletion) mutable {
    writer.step = ++manager_step;
    const auto start = Clock::now();
    manager.save(writer.step, 1.0e9 + static_cast<double>(writer.step),
                 [&](const fs::path& prefix) { writer.save(prefix); }, deletion);
    const double ms = ms_since(start);
    manager.wait_for_deletions();
    return ms;
  };
  runhooks::CheckpointManager now_manager({.checkpoint_dir = dir.path / "now", .max_to_keep = 2});
  runhooks::CheckpointManager background_manager(
      {.checkpoint_dir = dir.path / "background", .max_to_keep = 2});
  for (int i = 0; i < 2; ++i) {  // retention keeps 2: from here on every save drops one
    manager_save(now_manager, runhooks::DeleteDropped::now);
    manager_save(background_manager, runhooks::DeleteDropped::now);
  }
  add("manager, delete now", [&] { return manager_save(now_manager, runhooks::DeleteDropped::now); });
  add("manager, delete in background",
      [&] { return manager_save(background_manager, runhooks::DeleteDropped::in_background); });
  add("sync save (CRC-32, v1)", [&] { return timed_step(session_v1); });
  if (torch) add("torch.save+fsync+rename", [&] { return torch->save(dir.path / "model.pt"); });
  add(
      "CRC-32C of the array",
      [&] {
        const auto start = Clock::now();
        checksums += runhooks::detail::crc32c_extend(0, parameters->data(), bytes);
        return ms_since(start);
      },
      false);
  add(
      "Boost CRC-32 of the array",
      [&] {
        const auto start = Clock::now();
        checksums += VersionOneWriter::crc32(parameters->data(), bytes);
        return ms_since(start);
      },
      false);

  std::vector<std::size_t> order(contestants.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::mt19937 random(2024);
  for (int round = 0; round < rounds; ++round) {
    std::shuffle(order.begin(), order.end(), random);
    for (const std::size_t k : order) {
      Contestant& c = contestants[k];
      if (c.on_disk) {
        syncfs_of(dir.path);
        std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
      }
      const double ms = c.measure();
      if (ms < 0.0) die(c.name + " failed");
      c.ms.push_back(ms);
    }
  }

  // Every writer's file reads back.
  session.close();  // releases the directories
  session_v1.close();
  now_manager.close();
  background_manager.close();
  if (only.empty()) {
    const runhooks::FlatArrayReader alone(dir.path / "alone.arrays");
    if (alone.get<float>("parameters") != *parameters) die("alone.arrays does not read back");
    for (const char* sub : {"v2", "v1", "now", "background"}) {
      runhooks::CheckpointManager manager({.checkpoint_dir = dir.path / sub});
      manager.open(0.0);
      const runhooks::FlatArrayReader in(manager.latest()->string() + ".arrays");
      if (in.get<float>("parameters") != *parameters) die(std::string(sub) + " does not read back");
    }
  }

  std::printf("%zu MiB to %s, %d rounds, %d ms idle before each; median ms, quartiles, medians "
              "of the per-round ratios (CRC-32C engine: %s; checksums %08x)\n",
              mib, dir.path.parent_path().c_str(), rounds, settle_ms,
              runhooks::detail::crc32c_best_engine() == runhooks::detail::Crc32cEngine::portable
                  ? "portable"
                  : "CPU instruction",
              checksums);
  // Per-round ratios to write+fsync and, when they ran, to dd and to torch.save.
  const auto ratio_to = [&](const Contestant& c, const Contestant& yardstick) {
    std::vector<double> ratios;
    for (std::size_t r = 0; r < c.ms.size(); ++r) ratios.push_back(c.ms[r] / yardstick.ms[r]);
    return median(ratios);
  };
  std::vector<std::pair<std::string, const Contestant*>> yardsticks = {
      {"/write", &contestants.front()}};
  for (const Contestant& c : contestants) {
    if (c.name.rfind("dd ", 0) == 0) yardsticks.emplace_back("/dd", &c);
    if (c.name.rfind("torch.save", 0) == 0) yardsticks.emplace_back("/torch", &c);
  }
  std::printf("  %-31s %8s  [%7s %7s]", "", "median", "q1", "q3");
  for (const auto& [title, yardstick] : yardsticks) std::printf("  %6s", title.c_str());
  std::printf("\n");
  for (const Contestant& c : contestants) {
    std::printf("  %-31s %8.1f  [%7.1f %7.1f]", c.name.c_str(), median(c.ms),
                quantile(c.ms, 0.25), quantile(c.ms, 0.75));
    for (const auto& [title, yardstick] : yardsticks)
      std::printf("  %5.2fx", ratio_to(c, *yardstick));
    std::printf("\n");
  }
  return 0;
}
