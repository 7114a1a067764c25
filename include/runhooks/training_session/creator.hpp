// TrainingSessionCreator: how make_training_session's session makes its backend: the factory's,
// restored from the latest checkpoint; a worker first waits for the chief's first checkpoint.
#pragma once

#include <runhooks/detail/config.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <runhooks/checkpoint/checkpoint_state.hpp>
#include <runhooks/checkpoint/checkpointable.hpp>
#include <runhooks/checkpoint/chief_session_creator.hpp>
#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/sleep.hpp>
#include <runhooks/error.hpp>
#include <runhooks/hook_state.hpp>
#include <runhooks/hooks/signal_stop_hook.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_creator.hpp>

namespace runhooks {

// TensorFlow's session creators for MonitoredTrainingSession, for a backend factory. A
// Checkpointable backend is restored as ChiefSessionCreator restores it, from the latest
// checkpoint of checkpoint_dir, on creation and on every recovery; on a worker the first creation
// first waits up to max_wait_secs for the chief's first checkpoint (TensorFlow's
// WorkerSessionCreator waits that long for the chief to initialize, then fails with
// DeadlineExceededError "Session was not ready after waiting N secs."). Any other backend, or no
// checkpoint_dir: the factory's fresh backend.
template <BackendFactory Factory>
class TrainingSessionCreator {
 public:
  using backend_type = std::remove_cvref_t<std::invoke_result_t<Factory&>>;

  TrainingSessionCreator(Factory factory, std::filesystem::path checkpoint_dir, bool is_chief,
                         double max_wait_secs)
      : inner_(make_inner(std::move(factory), checkpoint_dir)),
        checkpoint_dir_(std::move(checkpoint_dir)), is_chief_(is_chief),
        max_wait_secs_(max_wait_secs) {}

  backend_type create_session() { return inner_.create_session(); }

  void initialize(backend_type& backend) {
    if constexpr (Checkpointable<backend_type>) {
      if (!is_chief_ && !checkpoint_dir_.empty()) wait_for_chief();
      inner_.initialize(backend);
    } else {
      (void)backend;
    }
  }

  // The session's stateful hooks take the states saved with the checkpoint the backend was
  // restored from (ChiefSessionCreator::restore_hook_states), on start and on every recovery.
  void restore_hook_states(const HookStateAccess& access)
    requires Checkpointable<backend_type>
  {
    inner_.restore_hook_states(access);
  }
  // The checkpoint the newest backend was restored from, if any (a rollback needs one).
  const std::optional<std::filesystem::path>& restored_from() const noexcept
    requires Checkpointable<backend_type>
  {
    return inner_.restored_from();
  }

  const RetryForever& policy() const noexcept { return policy_; }
  bool is_chief() const noexcept { return is_chief_; }

 private:
  using inner_type = std::conditional_t<Checkpointable<backend_type>, ChiefSessionCreator<Factory>,
                                        SessionCreator<Factory>>;

  static inner_type make_inner(Factory factory, const std::filesystem::path& checkpoint_dir) {
    if constexpr (Checkpointable<backend_type>) {
      const std::string dir = checkpoint_dir.string();
      return inner_type(std::move(factory), ChiefSessionOptions{.checkpoint_dir = dir});
    } else {
      return inner_type(std::move(factory));
    }
  }

  // Polls for the chief's checkpoint every 0.25 s. A signal SignalStopHook caught (make_training_
  // session installs it, from begin(), before this runs) ends the wait at once with an
  // UnavailableError: the session's recovery then finds the stop before its first retry and stops
  // without a backend (a stop always wins over creation and recovery).
  void wait_for_chief() {
    if (latest_checkpoint(checkpoint_dir_)) return;
    log(Severity::info, "runhooks: waiting up to " + detail::format_number(max_wait_secs_) +
                            " s for the chief's first checkpoint in " +
                            checkpoint_dir_.string() + ".");
    const auto signalled = [] { return SignalStopHook::stop_requested(); };
    double waited = 0.0;
    while (!latest_checkpoint(checkpoint_dir_)) {
      if (waited >= max_wait_secs_)
        throw DeadlineExceededError("Session was not ready after waiting " +
                                    detail::format_number(max_wait_secs_) +
                                    " secs. (runhooks: no checkpoint in " +
                                    checkpoint_dir_.string() + ")");
      const double nap = max_wait_secs_ - waited < 0.25 ? max_wait_secs_ - waited : 0.25;
      if (detail::wait_unless_stopped(nap, signalled))
        throw UnavailableError("runhooks: a signal stopped the wait for the chief's first "
                               "checkpoint in " + checkpoint_dir_.string() + ".");
      waited += nap;
    }
  }

  inner_type inner_;
  std::filesystem::path checkpoint_dir_;
  bool is_chief_;
  double max_wait_secs_;
  [[no_unique_address]] RetryForever policy_{};
};

}  // namespace runhooks
