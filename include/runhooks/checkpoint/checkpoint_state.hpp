// The checkpoint state file, <dir>/checkpoint: TensorFlow's CheckpointState in protobuf text
// format, read and written (atomically, after LevelDB's SetCurrentFile), and latest_checkpoint().
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <runhooks/checkpoint/checkpoint_error.hpp>
#include <runhooks/checkpoint/detail/durable_files.hpp>

namespace runhooks {

// The name of the state file in a checkpoint directory (TensorFlow's default latest_filename).
inline constexpr std::string_view checkpoint_state_filename = "checkpoint";

// TensorFlow's CheckpointState proto (tensorflow/python/training/checkpoint_state.proto), which
// tf.train.get_checkpoint_state() reads:
//
//   model_checkpoint_path: "model.ckpt-200"
//   all_model_checkpoint_paths: "model.ckpt-100"
//   all_model_checkpoint_paths: "model.ckpt-200"
//   all_model_checkpoint_timestamps: 1700000000.5
//   all_model_checkpoint_timestamps: 1700000060.25
//   last_preserved_timestamp: 1700000000.0
//
// Paths are checkpoint prefixes, relative to the directory or absolute. all_model_checkpoint_paths
// runs from the oldest save to the newest and ends with model_checkpoint_path.
// pending_deletions and file_suffixes are runhooks' own records, kept in comment lines that
// TensorFlow's parser skips:
//   # runhooks-delete: "model.ckpt-50"              checkpoints this state stopped naming, whose
//                                                    files a saver killed while deleting them
//                                                    leaves behind; the next saver deletes them;
//   # runhooks-files: "model.ckpt-200", ".arrays"   the suffixes of the files the backend wrote
//                                                    for a checkpoint runhooks saved, so that
//                                                    exactly those are deleted with it (see
//                                                    checkpoint/detail/checkpoint_files.hpp);
//   # runhooks-score: "model.ckpt-200", "val_loss", 0.25
//                                                    a best checkpoint's score and metric
//                                                    (BestCheckpointHook), in the order they
//                                                    entered the top k, so that a restart keeps
//                                                    ranking; its value as format_double writes
//                                                    it ("nan", "inf" and "-inf" included).
// A comment line that starts like one of these records and does not parse is an error naming the
// file and line; any other comment is skipped, as TensorFlow does.
struct CheckpointStateScore {
  std::string name;    // a checkpoint the state names
  std::string metric;  // the monitored metric's name
  double score;
  friend bool operator==(const CheckpointStateScore& a, const CheckpointStateScore& b) {
    return a.name == b.name && a.metric == b.metric &&
           (a.score == b.score || (a.score != a.score && b.score != b.score));
  }
};

struct CheckpointState {
  std::string model_checkpoint_path;
  std::vector<std::string> all_model_checkpoint_paths;
  std::vector<double> all_model_checkpoint_timestamps;
  std::optional<double> last_preserved_timestamp;
  std::vector<std::string> pending_deletions;
  std::map<std::string, std::vector<std::string>> file_suffixes{};
  std::vector<CheckpointStateScore> scores{};

  friend bool operator==(const CheckpointState&, const CheckpointState&) = default;
};

namespace detail {

inline void append_quoted(std::string& out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (byte < 0x20 || byte >= 0x7f) {  // octal, as Python's text_format writes bytes
          out += '\\';
          out += static_cast<char>('0' + (byte >> 6));
          out += static_cast<char>('0' + ((byte >> 3) & 7));
          out += static_cast<char>('0' + (byte & 7));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// The shortest text that reads back as the same double, with ".0" on integral values, as
// Python's text_format writes floats.
inline std::string format_double(double value) {
  char text[64];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);
  std::string out(text, error == std::errc{} ? end : text);
  if (out.find_first_of(".eEn") == std::string::npos) out += ".0";  // "n": inf and nan
  return out;
}

// A small protobuf text-format reader, enough for CheckpointState: fields `name: value`
// separated by white space (and optionally ',' or ';'), `#` comments, strings in single or
// double quotes with C escapes, adjacent strings concatenated, floats as protobuf writes them.
class StateParser {
 public:
  StateParser(std::string_view text, const std::filesystem::path& file) : text_(text), file_(file) {}

  CheckpointState parse() {
    CheckpointState state;
    bool has_model_path = false, has_preserved = false;
    for (skip_space(); at_ < text_.size(); skip_space()) {
      const std::size_t field_at = at_;  // errors about the field point at its line
      const std::string field = identifier();
      skip_space();
      if (peek() == ':') {
        ++at_;
        skip_space();
      }
      if (field == "model_checkpoint_path") {
        if (has_model_path) fail("model_checkpoint_path appears twice", field_at);
        state.model_checkpoint_path = string_value();
        has_model_path = true;
      } else if (field == "all_model_checkpoint_paths") {
        state.all_model_checkpoint_paths.push_back(string_value());
      } else if (field == "all_model_checkpoint_timestamps") {
        state.all_model_checkpoint_timestamps.push_back(number_value());
      } else if (field == "last_preserved_timestamp") {
        if (has_preserved) fail("last_preserved_timestamp appears twice", field_at);
        state.last_preserved_timestamp = number_value();
        has_preserved = true;
      } else {
        fail("unknown field '" + field + "'", field_at);
      }
      skip_space();
      if (peek() == ',' || peek() == ';') ++at_;
    }
    state.pending_deletions = std::move(pending_);
    state.file_suffixes = std::move(file_suffixes_);
    state.scores = std::move(scores_);
    return state;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail(what, at_); }
  [[noreturn]] void fail(const std::string& what, std::size_t where) const {
    std::size_t line = 1;
    for (std::size_t i = 0; i < where && i < text_.size(); ++i) line += text_[i] == '\n';
    throw CheckpointError("runhooks: checkpoint state file " + quoted_path(file_) + ", line " +
                          std::to_string(line) + ": " + what + ".");
  }

  char peek() const noexcept { return at_ < text_.size() ? text_[at_] : '\0'; }

  void skip_space() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
        ++at_;
      } else if (c == '#') {
        const std::size_t end = std::min(text_.find('\n', at_), text_.size());
        comment(text_.substr(at_ + 1, end - at_ - 1));
        at_ = end;
      } else {
        break;
      }
    }
  }

  // runhooks' records; other comments are skipped, as TensorFlow does.
  void comment(std::string_view body) {
    constexpr std::string_view score = " runhooks-score: ";
    if (body.substr(0, score.size()) == score) return score_record(body, score.size());
    constexpr std::string_view remove = " runhooks-delete: ", files = " runhooks-files: ";
    const bool is_remove = body.substr(0, remove.size()) == remove;
    if (!is_remove && body.substr(0, files.size()) != files) return;
    const std::size_t at = static_cast<std::size_t>(body.data() - text_.data()) + remove.size();
    StateParser inner(text_.substr(0, static_cast<std::size_t>(body.data() - text_.data()) + body.size()),
                      file_);
    inner.at_ = is_remove ? at : at - remove.size() + files.size();
    std::string name = inner.string_value();
    if (is_remove) {
      pending_.push_back(std::move(name));
    } else {
      std::vector<std::string>& suffixes = file_suffixes_[std::move(name)];
      while (inner.peek() == ',') {
        ++inner.at_;
        inner.skip_space();
        suffixes.push_back(inner.string_value());
      }
    }
    if (inner.at_ != inner.text_.size()) inner.fail("unexpected text after a runhooks record");
  }

  // "<name>", "<metric>", <number>: nothing more, nothing less.
  void score_record(std::string_view body, std::size_t skip) {
    const std::size_t start = static_cast<std::size_t>(body.data() - text_.data());
    StateParser inner(text_.substr(0, start + body.size()), file_);
    inner.at_ = start + skip;
    CheckpointStateScore record;
    record.name = inner.string_value();
    if (inner.peek() != ',') inner.fail("expected ', \"<metric>\", <score>' after the name in a runhooks-score record");
    ++inner.at_;
    inner.skip_space();
    record.metric = inner.string_value();
    if (inner.peek() != ',') inner.fail("expected ', <score>' after the metric in a runhooks-score record");
    ++inner.at_;
    while (inner.peek() == ' ') ++inner.at_;
    record.score = inner.number_value();
    if (inner.at_ != inner.text_.size()) inner.fail("unexpected text after a runhooks-score record");
    if (record.name.empty() || record.metric.empty())
      inner.fail("a runhooks-score record with an empty name or metric", start);
    scores_.push_back(std::move(record));
  }

  std::string identifier() {
    const std::size_t start = at_;
    while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) != 0 ||
                                  text_[at_] == '_'))
      ++at_;
    if (at_ == start) fail(std::string("expected a field name, found '") + peek() + "'");
    return std::string(text_.substr(start, at_ - start));
  }

  std::string string_value() {
    if (peek() != '"' && peek() != '\'') fail("expected a quoted string");
    std::string out;
    while (peek() == '"' || peek() == '\'') {  // adjacent strings concatenate
      const char quote = text_[at_++];
      for (;;) {
        if (at_ >= text_.size() || text_[at_] == '\n') fail("unterminated string");
        const char c = text_[at_++];
        if (c == quote) break;
        if (c != '\\') {
          out += c;
          continue;
        }
        if (at_ >= text_.size()) fail("unterminated string");
        const char e = text_[at_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'a': out += '\a'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'v': out += '\v'; break;
          case '\\': case '\'': case '"': case '?': out += e; break;
          case 'x': case 'X': {
            int value = 0, digits = 0;
            while (digits < 2 && at_ < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[at_]))) {
              const char h = text_[at_++];
              value = value * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
              ++digits;
            }
            if (digits == 0) fail("\\x without hex digits");
            out += static_cast<char>(value);
            break;
          }
          default:
            if (e >= '0' && e <= '7') {
              int value = e - '0', digits = 1;
              while (digits < 3 && at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '7') {
                value = value * 8 + (text_[at_++] - '0');
                ++digits;
              }
              out += static_cast<char>(value);
            } else {
              fail(std::string("unknown escape \\") + e);
            }
        }
      }
      skip_space();
    }
    return out;
  }

  double number_value() {
    const std::size_t start = at_;
    while (at_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[at_])) != 0 ||
                                  text_[at_] == '.' || text_[at_] == '-' || text_[at_] == '+'))
      ++at_;
    std::string_view token = text_.substr(start, at_ - start);
    if (!token.empty() && token.front() == '+') token.remove_prefix(1);
    if (token.size() > 1 && (token.back() == 'f' || token.back() == 'F') &&
        token.find_first_of("nN") == std::string_view::npos)  // "1.5f", but not "inf"
      token.remove_suffix(1);
    double value = 0.0;
    const auto [end, error] = std::from_chars(token.data(), token.data() + token.size(), value);
    if (token.empty() || error != std::errc{} || end != token.data() + token.size())
      fail("'" + std::string(text_.substr(start, at_ - start)) + "' is not a number");
    return value;
  }

  std::string_view text_;
  const std::filesystem::path& file_;
  std::size_t at_ = 0;
  std::vector<std::string> pending_;
  std::map<std::string, std::vector<std::string>> file_suffixes_;
  std::vector<CheckpointStateScore> scores_;
};

inline std::filesystem::path join_checkpoint_path(const std::filesystem::path& directory,
                                                  const std::string& path) {
  const std::filesystem::path p(path);
  return p.is_absolute() ? p : directory / p;
}

}  // namespace detail

// The text TensorFlow's text_format.MessageToString writes for `state`, preceded by one comment
// line and runhooks' pending_deletions, file_suffixes and scores comments.
inline std::string format_checkpoint_state(const CheckpointState& state) {
  std::string out = "# CheckpointState (TensorFlow text format), written by runhooks\n";
  for (const std::string& pending : state.pending_deletions) {
    out += "# runhooks-delete: ";
    detail::append_quoted(out, pending);
    out += '\n';
  }
  for (const auto& [name, suffixes] : state.file_suffixes) {
    out += "# runhooks-files: ";
    detail::append_quoted(out, name);
    for (const std::string& suffix : suffixes) {
      out += ", ";
      detail::append_quoted(out, suffix);
    }
    out += '\n';
  }
  for (const CheckpointStateScore& record : state.scores) {
    out += "# runhooks-score: ";
    detail::append_quoted(out, record.name);
    out += ", ";
    detail::append_quoted(out, record.metric);
    out += ", " + detail::format_double(record.score) + '\n';
  }
  out += "model_checkpoint_path: ";
  detail::append_quoted(out, state.model_checkpoint_path);
  out += '\n';
  for (const std::string& path : state.all_model_checkpoint_paths) {
    out += "all_model_checkpoint_paths: ";
    detail::append_quoted(out, path);
    out += '\n';
  }
  for (const double timestamp : state.all_model_checkpoint_timestamps)
    out += "all_model_checkpoint_timestamps: " + detail::format_double(timestamp) + '\n';
  if (state.last_preserved_timestamp)
    out += "last_preserved_timestamp: " + detail::format_double(*state.last_preserved_timestamp) +
           '\n';
  return out;
}

// Parses a state file's text; `file` only names it in errors. A syntax error, an unknown field or
// a missing model_checkpoint_path is a CheckpointError with the file and line (TensorFlow logs a
// warning and ignores the file, which silently restarts training from scratch).
inline CheckpointState parse_checkpoint_state(std::string_view text,
                                              const std::filesystem::path& file = "checkpoint") {
  CheckpointState state = detail::StateParser(text, file).parse();
  if (state.model_checkpoint_path.empty())
    throw CheckpointError("runhooks: checkpoint state file " + detail::quoted_path(file) +
                          " has no model_checkpoint_path.");
  return state;
}

// The state file of `checkpoint_dir` with its paths as written; std::nullopt when there is none.
inline std::optional<CheckpointState> read_checkpoint_state(
    const std::filesystem::path& checkpoint_dir) {
  const std::filesystem::path file = checkpoint_dir / checkpoint_state_filename;
  std::error_code error;
  if (!std::filesystem::exists(file, error)) {
    if (error && error != std::errc::no_such_file_or_directory &&
        error != std::errc::not_a_directory)
      detail::throw_file_error("cannot read", file, error.value());
    return std::nullopt;
  }
  return parse_checkpoint_state(detail::read_whole_file(file), file);
}

// tf.train.get_checkpoint_state(checkpoint_dir): the state with relative paths joined to the
// directory; std::nullopt when there is no state file. A state file that cannot be read or parsed
// is a CheckpointError (TensorFlow: a warning and None).
inline std::optional<CheckpointState> get_checkpoint_state(
    const std::filesystem::path& checkpoint_dir) {
  std::optional<CheckpointState> state = read_checkpoint_state(checkpoint_dir);
  if (state) {
    state->model_checkpoint_path =
        detail::join_checkpoint_path(checkpoint_dir, state->model_checkpoint_path).string();
    for (std::string& path : state->all_model_checkpoint_paths)
      path = detail::join_checkpoint_path(checkpoint_dir, path).string();
  }
  return state;
}

namespace detail {

// write_checkpoint_state, with, when `names_first`, one more fsync of the directory between the
// temporary file's fsync and the rename: the names created in the directory before the call (a
// checkpoint's links, a staging file) are then durable before a state that names them can be
// (POSIX orders no two changes of a directory without it). Placed after the temporary file's
// fsync rather than right after those names were made, it usually waits for nothing: on a
// journaling file system (ext4, XFS) the temporary file's fsync commits every earlier change of
// the directory along with it.
inline void replace_checkpoint_state(const std::filesystem::path& checkpoint_dir,
                                     const CheckpointState& state, bool names_first) {
  const std::filesystem::path temporary =
      checkpoint_dir / (std::string(checkpoint_state_filename) + ".tmp-" + unique_token());
  try {
    write_file_durably(temporary, format_checkpoint_state(state));
    if (names_first) fsync_path(checkpoint_dir, /*directory=*/true);
    rename_over(temporary, checkpoint_dir / checkpoint_state_filename);
  } catch (...) {
    remove_file_quietly(temporary);
    throw;
  }
  fsync_path(checkpoint_dir, /*directory=*/true);
}

}  // namespace detail

// Replaces <checkpoint_dir>/checkpoint atomically: the text goes to a temporary file in the same
// directory, which is fsynced, renamed over the state file, and the directory fsynced. A process
// killed at any instant leaves the old state file or the new one, whole.
inline void write_checkpoint_state(const std::filesystem::path& checkpoint_dir,
                                   const CheckpointState& state) {
  detail::replace_checkpoint_state(checkpoint_dir, state, /*names_first=*/false);
}

// Whether any file of checkpoint `prefix` exists: the prefix itself or the prefix followed by a
// non-digit ("model.ckpt-100.arrays").
inline bool checkpoint_exists(const std::filesystem::path& prefix) {
  return !detail::files_of_prefix(prefix).empty();
}

// tf.train.latest_checkpoint(checkpoint_dir): the prefix of the newest checkpoint, or std::nullopt
// when the directory or its state file does not exist. A state file naming a checkpoint none of
// whose files exist is a CheckpointError naming both (TensorFlow logs an error and returns None,
// and training starts again from scratch).
inline std::optional<std::filesystem::path> latest_checkpoint(
    const std::filesystem::path& checkpoint_dir) {
  const std::optional<CheckpointState> state = get_checkpoint_state(checkpoint_dir);
  if (!state) return std::nullopt;
  const std::filesystem::path prefix(state->model_checkpoint_path);
  if (!checkpoint_exists(prefix))
    throw CheckpointError("runhooks: checkpoint state file " +
                          detail::quoted_path(checkpoint_dir / checkpoint_state_filename) +
                          " names checkpoint " + detail::quoted_path(prefix) +
                          ", but none of its files exists.");
  return prefix;
}

}  // namespace runhooks
