// What a CheckpointManager is given and what it lists: its options, when the checkpoints that
// retention drops are deleted, and the entries of the state file.
#pragma once

#include <runhooks/detail/config.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace runhooks {

// When CheckpointManager::save deletes the checkpoints that retention drops. Either way the state
// file has stopped naming them and records them as pending deletion before any file goes, so a
// process killed while they are being deleted leaves files the next open() removes.
enum class DeleteDropped {
  now,            // before save() returns, on the calling thread
  in_background,  // on a thread of their own, started once the save is committed: save() returns
                  // without paying for freeing a large checkpoint's blocks (~24 ms for 64 MiB on
                  // ext4). The next save(), open() or close() waits for it first
                  // (wait_for_deletions()), so no two operations on the directory overlap.
};

struct CheckpointManagerOptions {
  std::filesystem::path checkpoint_dir;
  std::string basename = "model.ckpt";
  int max_to_keep = 5;  // 0 keeps every checkpoint (and the state file names only the latest)
  std::optional<double> keep_checkpoint_every_n_hours{};
};

struct CheckpointEntry {
  std::string name;  // as in the state file: relative to the directory, or absolute
  double timestamp;  // seconds since the epoch when it was saved
  friend bool operator==(const CheckpointEntry&, const CheckpointEntry&) = default;
};

}  // namespace runhooks
