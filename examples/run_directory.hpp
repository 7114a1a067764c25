// Where examples/demo and examples/torch/train_digits keep their files when not told: a new run
// directory next to the executable, and the `tensorboard --logdir DIR` line that opens it.
//
// A new directory per run rather than one directory cleared each time: nothing is ever deleted
// (we could not prove every file in a reused directory was ours), two runs never share an event
// file, and `tensorboard --logdir` on the parent shows each run as its own line on the charts.
#pragma once

#include <ctime>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace example_runs {

// `<directory of this executable>/<its name>-runs/run-YYYYMMDD-HHMMSS` (local time; -2, -3, ...
// when a run started in the same second), created here: the same place whatever the current
// directory. Throws std::filesystem::filesystem_error when the executable's path is unknown or
// the directory cannot be made.
inline std::filesystem::path new_run_directory() {
  namespace fs = std::filesystem;
  const fs::path exe = fs::read_symlink("/proc/self/exe");  // absolute, symbolic links resolved
  const fs::path parent = exe.parent_path() / (exe.filename().string() + "-runs");
  fs::create_directories(parent);
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "run-%Y%m%d-%H%M%S", &local);
  // create_directory is mkdir: it fails on an existing directory, so two runs in one second
  // (tests in parallel) still get one directory each.
  for (int n = 1;; ++n) {
    const fs::path dir = parent / (n == 1 ? std::string(stamp) : stamp + ("-" + std::to_string(n)));
    if (fs::create_directory(dir)) return dir;
  }
}

// `dir` as the user can type it from the current directory: relative when it is below it (what
// `./dev demo` prints from the repository's root), absolute otherwise.
inline std::filesystem::path display_path(const std::filesystem::path& dir) {
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec || dir.is_relative()) return dir;
  const std::filesystem::path rel = dir.lexically_relative(cwd);
  if (rel.empty() || *rel.begin() == "..") return dir;
  return rel;
}

// One shell word: `word` as is when it holds only characters no shell treats specially, else in
// single quotes, so the printed command can be pasted whatever the directory's name.
inline std::string shell_word(std::string_view word) {
  constexpr std::string_view plain =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:@%+=,-";
  if (!word.empty() && word.find_first_not_of(plain) == std::string_view::npos)
    return std::string(word);
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The last line each example prints.
inline std::string tensorboard_command(const std::filesystem::path& dir) {
  return "tensorboard --logdir " + shell_word(display_path(dir).string());
}

}  // namespace example_runs
