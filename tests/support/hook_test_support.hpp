// Shared by the tests of the hooks and the event files: a temporary directory, running a tool script of
// the source tree, and reading a whole file.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <system_error>

namespace hook_test {

namespace fs = std::filesystem;

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "runhooks-hooks-") {
    std::random_device entropy;
    path_ = fs::temp_directory_path() / (prefix + std::to_string(entropy()));
    fs::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// tools/<name> of the source tree, or nothing when RUNHOOKS_SOURCE_DIR is unset (the test then
// says it skipped).
inline std::optional<fs::path> tool(const std::string& name) {
  const char* source_dir = std::getenv("RUNHOOKS_SOURCE_DIR");
  if (source_dir == nullptr) return std::nullopt;
  return fs::path(source_dir) / "tools" / name;
}

struct ToolRun {
  int status;
  std::string out;
  std::string err;
};

// Runs `python3 script args...`, capturing its output in `scratch`.
inline ToolRun run_python(const fs::path& script, const std::string& args, const fs::path& scratch) {
  const fs::path out = scratch / "tool.out";
  const fs::path err = scratch / "tool.err";
  const std::string command = "python3 " + shell_quote(script.string()) + " " + args + " > " +
                              shell_quote(out.string()) + " 2> " + shell_quote(err.string());
  const int status = std::system(command.c_str());
  return {status, read_file(out), read_file(err)};
}

inline bool python_has(const std::string& module) {
  const std::string command = "python3 -c \"import " + module + "\" > /dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}

}  // namespace hook_test
