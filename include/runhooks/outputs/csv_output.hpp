// CsvOutput: StepCounterHook's rates appended to a CSV file.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include <runhooks/detail/config.hpp>
#include <runhooks/log.hpp>

namespace runhooks {

// Appends "global_step,tag,steps_per_sec" rows to a CSV file, with a header when the file is new
// or empty, flushing each row. A file that cannot be opened is a std::system_error from the
// constructor, naming the path. A row that cannot be written (disk full, file size limit) is
// never lost silently: the first failure logs a warning with the path and the cause, later rows
// are dropped, and error() tells what happened (reach the output with
// session.hook<I>().output()). Copies share one file.
class CsvOutput {
 public:
  explicit CsvOutput(const std::filesystem::path& path) : state_(std::make_shared<State>()) {
    state_->path = path.string();
    std::error_code ignored;
    const bool fresh = !std::filesystem::exists(path, ignored) ||
                       (std::filesystem::is_regular_file(path, ignored) &&
                        std::filesystem::file_size(path, ignored) == 0);
    errno = 0;
    state_->file = std::fopen(state_->path.c_str(), "a");
    if (state_->file == nullptr)
      throw std::system_error(errno != 0 ? errno : EIO, std::generic_category(),
                              "runhooks::CsvOutput: cannot open " + state_->path);
    if (fresh) write("global_step,tag,steps_per_sec\n");
  }

  void record(std::string_view tag, double steps_per_sec, std::int64_t global_step) {
    char row[320];
    std::snprintf(row, sizeof row, "%lld,%.*s,%g\n", static_cast<long long>(global_step),
                  static_cast<int>(tag.size()), tag.data(), steps_per_sec);
    write(row);
  }

  // The first write failure (errno's code), or an empty code while every row was written.
  std::error_code error() const noexcept { return state_->error; }

 private:
  struct State {
    std::string path;
    std::FILE* file = nullptr;
    std::error_code error;
    ~State() {
      if (file != nullptr) std::fclose(file);
    }
  };

  void write(const char* text) {
    if (state_->error) return;
    errno = 0;
    if (std::fputs(text, state_->file) < 0 || std::fflush(state_->file) != 0) {
      state_->error = std::error_code(errno != 0 ? errno : EIO, std::generic_category());
      std::clearerr(state_->file);
      log(Severity::warning, "runhooks::CsvOutput: cannot write " + state_->path + ": " +
                                 state_->error.message() + "; later rows are dropped.");
    }
  }

  std::shared_ptr<State> state_;
};

}  // namespace runhooks
