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
// or empty, flushing each row; a tag with a comma, quote or line break is quoted (RFC 4180). A
// file that cannot be opened is a std::system_error from the constructor, naming the path. A
// row that cannot be written (disk full, file size limit) is never lost silently: the first
// failure logs a warning with the path and the cause, later rows are dropped, and error() tells
// what happened (reach the output with session.hook<I>().output()); the file may end with part
// of the row that failed. A failure to close is logged too. Copies share one file.
class CsvOutput {
 public:
  explicit CsvOutput(const std::filesystem::path& path) : state_(std::make_shared<State>()) {
    state_->path = path;
    std::error_code ignored;
    const bool fresh = !std::filesystem::exists(path, ignored) ||
                       (std::filesystem::is_regular_file(path, ignored) &&
                        std::filesystem::file_size(path, ignored) == 0);
    errno = 0;
    state_->file = std::fopen(state_->path.c_str(), "a");
    if (state_->file == nullptr)
      throw std::system_error(errno != 0 ? errno : EIO, std::generic_category(),
                              "runhooks::CsvOutput: cannot open " + state_->path.string());
    if (fresh) write("global_step,tag,steps_per_sec\n");
  }

  void record(std::string_view tag, double steps_per_sec, std::int64_t global_step) {
    char rate[32];
    std::snprintf(rate, sizeof rate, "%g", steps_per_sec);
    std::string row = std::to_string(global_step);
    row += ',';
    append_field(row, tag);
    row += ',';
    row += rate;
    row += '\n';
    write(row);
  }

  // The first write failure (errno's code), or an empty code while every row was written.
  std::error_code error() const noexcept { return state_->error; }
  // The file, as given.
  const std::filesystem::path& path() const noexcept { return state_->path; }

 private:
  struct State {
    std::filesystem::path path;
    std::FILE* file = nullptr;
    std::error_code error;
    ~State() {
      if (file == nullptr) return;
      // Every row was flushed, so this can fail only in close itself (NFS, for one).
      errno = 0;
      if (std::fclose(file) != 0 && !error) {
        try {
          log(Severity::warning, "runhooks::CsvOutput: cannot close " + path.string() + ": " +
                                     std::error_code(errno != 0 ? errno : EIO,
                                                     std::generic_category()).message());
        } catch (...) {  // the log sink threw, or out of memory: nothing more can be said
        }
      }
    }
  };

  // RFC 4180: a tag holding a comma, a quote or a line break is quoted, so it stays one field.
  static void append_field(std::string& row, std::string_view text) {
    if (text.find_first_of(",\"\r\n") == std::string_view::npos) {
      row += text;
      return;
    }
    row += '"';
    for (const char c : text) {
      if (c == '"') row += '"';
      row += c;
    }
    row += '"';
  }

  void write(std::string_view text) {
    if (state_->error) return;
    errno = 0;
    if (std::fwrite(text.data(), 1, text.size(), state_->file) != text.size() ||
        std::fflush(state_->file) != 0) {
      state_->error = std::error_code(errno != 0 ? errno : EIO, std::generic_category());
      std::clearerr(state_->file);
      log(Severity::warning, "runhooks::CsvOutput: cannot write " + state_->path.string() +
                                 ": " + state_->error.message() + "; later rows are dropped.");
    }
  }

  std::shared_ptr<State> state_;
};

}  // namespace runhooks
