// Which checkpoint directories this process's background saves are writing to, so that a
// restore waits for the save in flight to its directory (CheckpointSaverHook adds and removes,
// ChiefSessionCreator waits).
#pragma once

#include <runhooks/detail/config.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

namespace runhooks::detail {

// The checkpoint directories that saves of this process are writing to in the background. A
// restore waits until none is in flight to its directory, so that a recovery restores the save
// that was being written when the backend was lost, not the one before.
class SavesInFlight {
 public:
  static SavesInFlight& instance() {
    static SavesInFlight saves;
    return saves;
  }
  void add(const std::string& directory) {
    std::lock_guard lock(mutex_);
    ++count_[directory];
  }
  void remove(const std::string& directory) {
    {
      std::lock_guard lock(mutex_);
      if (--count_[directory] == 0) count_.erase(directory);
    }
    changed_.notify_all();
  }
  void wait(const std::string& directory) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return count_.find(directory) == count_.end(); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, int> count_;
};


}  // namespace runhooks::detail
