// Which files are one checkpoint's: the rule that retention and clean-up delete by. The state file
// is untrusted input (TensorFlow writes absolute paths and un-stepped prefixes; a damaged or
// hostile one can name anything), so nothing it says is deleted unless it is provably one
// checkpoint's file inside the checkpoint directory:
//   - the name is a plain file name in the directory: relative without '/', or absolute with the
//     directory as its parent (symbolic links resolved); "", ".", "..", "../x", "sub/x",
//     "/elsewhere/x" and "<dir>/" are not;
//   - a file of it is named exactly <name><suffix>: for a checkpoint runhooks saved, a suffix the
//     backend wrote at save time, recorded in the state file (# runhooks-files lines); for any
//     other (TensorFlow's, or one whose record is gone), TensorFlow's suffixes (.index,
//     .data-NNNNN-of-NNNNN, .meta) and runhooks' own backends' (.arrays, .pt);
//   - it is a regular file or a symbolic link (unlinking a link never touches its target), and not
//     the state file or the directory's lock.
// Never "every name that starts with the prefix": model.ckpt-40.arrays is not model.ckpt's.
#pragma once

#include <runhooks/detail/config.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <sys/stat.h>

#include <runhooks/checkpoint/detail/durable_files.hpp>

namespace runhooks::detail {

// The lock file that makes one process the directory's writer (directory_lock.hpp).
inline constexpr std::string_view checkpoint_lock_filename = ".runhooks-lock";

// One spelling per directory: absolute, symbolic links resolved as far as the path exists.
inline std::string directory_key(const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(directory, error);
  if (error) return directory.lexically_normal().string();
  std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, error);
  std::string key = (error ? absolute.lexically_normal() : canonical).string();
  while (key.size() > 1 && key.back() == '/') key.pop_back();
  return key;
}

// Whether `name` can be a file of this directory at all: one path component, not "." or "..".
inline bool is_plain_file_name(std::string_view name) noexcept {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// A state-file entry as a checkpoint of the directory whose directory_key() is `key`: its plain
// file name; std::nullopt when the entry is anything else (see the rule at the top).
inline std::optional<std::string> own_checkpoint_name(const std::string& key, std::string_view entry) {
  if (entry.find('\0') != std::string_view::npos) return std::nullopt;
  if (entry.empty() || entry.front() != '/')
    return is_plain_file_name(entry) ? std::optional<std::string>(entry) : std::nullopt;
  const std::filesystem::path path(entry);
  const std::string file = path.filename().string();
  if (!is_plain_file_name(file)) return std::nullopt;
  if (directory_key(path.parent_path()) != key) return std::nullopt;
  return file;
}

// TensorFlow's V2 checkpoint suffixes (Saver and tf.train.Checkpoint: .index, .data-NNNNN-of-NNNNN,
// .meta) and those of runhooks' own backends (FlatArrayWriter's .arrays in the examples,
// TorchBackend's .pt).
inline bool is_known_checkpoint_suffix(std::string_view suffix) noexcept {
  if (suffix == ".index" || suffix == ".meta" || suffix == ".arrays" || suffix == ".pt") return true;
  constexpr std::string_view data = ".data-", of = "-of-";
  if (suffix.size() != data.size() + 5 + of.size() + 5 || suffix.substr(0, data.size()) != data ||
      suffix.substr(data.size() + 5, of.size()) != of)
    return false;
  const auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(suffix.substr(data.size(), 5)) && digits(suffix.substr(data.size() + 5 + of.size()));
}

// Whether `suffix` can follow a checkpoint prefix: no '/', and not a digit first
// (model.ckpt-1 followed by "0.arrays" is model.ckpt-10's file).
inline bool is_valid_checkpoint_suffix(std::string_view suffix) noexcept {
  return suffix.find('/') == std::string_view::npos && suffix.find('\0') == std::string_view::npos &&
         (suffix.empty() || !(suffix.front() >= '0' && suffix.front() <= '9'));
}

// What a backend's save(dir / stage) wrote: the suffix of each file named `stage` + suffix, each
// a suffix a checkpoint may have and each file fsynced. A file of another name, or none at all, is
// a CheckpointError naming it (the manager's commit and ExceptionCheckpointHook share this).
inline std::vector<std::string> staged_checkpoint_suffixes(const std::filesystem::path& dir,
                                                           const std::string& stage) {
  std::vector<std::string> suffixes;
  for (const std::string& file : names_starting_with(dir, stage)) {
    const std::string suffix = file.substr(stage.size());
    if (!is_valid_checkpoint_suffix(suffix))
      throw CheckpointError("runhooks: the backend's save wrote " + quoted_path(dir / file) +
                            ": a checkpoint file must be named by the prefix, or the prefix "
                            "followed by a non-digit (e.g. '.arrays').");
    suffixes.push_back(suffix);
  }
  if (suffixes.empty())
    throw CheckpointError("runhooks: the backend's save(" + quoted_path(dir / stage) +
                          ") wrote no file whose name starts with that prefix.");
  for (const std::string& suffix : suffixes) fsync_path(dir / (stage + suffix));
  return suffixes;
}

// Files runhooks never deletes through a checkpoint name: the state file, its temporary copies,
// and the lock.
inline bool is_reserved_file(std::string_view file) noexcept {
  constexpr std::string_view state = "checkpoint";
  return file == state || file == checkpoint_lock_filename ||
         (file.size() > state.size() && file.substr(0, state.size()) == state &&
          file.substr(state.size(), 5) == ".tmp-");
}

// Whether `text` starts with a token of detail::unique_token(): 16 lowercase hex digits.
inline bool starts_with_unique_token(std::string_view text) noexcept {
  constexpr std::size_t digits = 16;
  return text.size() >= digits &&
         std::all_of(text.begin(), text.begin() + digits,
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The names of runhooks' own temporary files, exactly (issue 29: never a user's file named like
// one, checkpoint.tmp-notes.txt): checkpoint.tmp-<token>, a state file being written
// (write_checkpoint_state), and .runhooks-probe-<token>, open()'s write probe.
inline bool is_temporary_file_name(std::string_view file) noexcept {
  for (const std::string_view start : {std::string_view("checkpoint.tmp-"), std::string_view(".runhooks-probe-")})
    if (file.size() == start.size() + 16 && file.substr(0, start.size()) == start &&
        starts_with_unique_token(file.substr(start.size())))
      return true;
  return false;
}

// For a staging file of a save, .<basename>-<step>.tmp-<token><what the backend wrote>, the
// length of its staging prefix .<basename>-<step>.tmp-<token>; 0 for any other name. <step> as
// std::to_string writes it (no '+', no leading zero), <token> as unique_token(): only names a
// save of runhooks can have made.
inline std::size_t staging_prefix_length(std::string_view file, std::string_view basename) noexcept {
  constexpr std::string_view tmp = ".tmp-";
  if (file.size() < 2 + basename.size() || file[0] != '.' ||
      file.substr(1, basename.size()) != basename || file[1 + basename.size()] != '-')
    return 0;
  std::size_t at = 2 + basename.size();
  const bool negative = at < file.size() && file[at] == '-';
  if (negative) ++at;
  const std::size_t digits = at;
  while (at < file.size() && file[at] >= '0' && file[at] <= '9') ++at;
  if (at == digits || (file[digits] == '0' && (at - digits > 1 || negative))) return 0;
  if (file.substr(at, tmp.size()) != tmp || !starts_with_unique_token(file.substr(at + tmp.size())))
    return 0;
  return at + tmp.size() + 16;
}

// Whether `path` is a regular file or a symbolic link (not followed): what runhooks' clean-up may
// remove, since removing a link never touches its target; never a directory, a FIFO or a device.
inline bool is_file_or_link(const std::filesystem::path& path) noexcept {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && (S_ISREG(info.st_mode) || S_ISLNK(info.st_mode));
}

// The files of own checkpoint `name` present in `directory` (file names, sorted): <name><suffix>
// for each suffix `recorded` at save time, or without a record for each known suffix; regular
// files and symbolic links only, never a reserved file.
inline std::vector<std::string> checkpoint_files(const std::filesystem::path& directory,
                                                 const std::string& name,
                                                 const std::vector<std::string>* recorded) {
  std::vector<std::string> files;
  for (std::string& file : names_starting_with(directory, name)) {
    const std::string_view suffix = std::string_view(file).substr(name.size());
    const bool named = recorded == nullptr
                           ? is_known_checkpoint_suffix(suffix)
                           : std::find(recorded->begin(), recorded->end(), suffix) != recorded->end();
    if (!named || !is_valid_checkpoint_suffix(suffix) || is_reserved_file(file)) continue;
    struct stat info {};
    if (::lstat((directory / file).c_str(), &info) != 0) continue;
    if (S_ISREG(info.st_mode) || S_ISLNK(info.st_mode)) files.push_back(std::move(file));
  }
  return files;
}

}  // namespace runhooks::detail
