// StopAtStepHook: requests a stop once the global step reaches a last step.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include <runhooks/concepts.hpp>

namespace runhooks {

struct StopAtStepOptions {
  std::optional<std::int64_t> num_steps{};  // counted from the global step at the first session
  std::optional<std::int64_t> last_step{};
};

// Stops once the global step after a run is at least the last step. With num_steps, the last
// step is the global step at the first after_create_session() plus num_steps; it is not re-based
// when the backend is re-created. Per step: one load of the last step and one compare with the
// global step. Unlike TensorFlow it needs no second read: the backend's global_step() is read
// after the step, never stale.
class StopAtStepHook {
 public:
  explicit StopAtStepHook(StopAtStepOptions options)
      : last_step_(options.last_step.value_or(0)), num_steps_(options.num_steps.value_or(0)),
        pending_(!options.last_step) {
    if (!options.num_steps && !options.last_step)
      throw std::invalid_argument("One of num_steps or last_step must be specified.");
    if (options.num_steps && options.last_step)
      throw std::invalid_argument("Only one of num_steps or last_step can be specified.");
  }

  template <class Backend>
  void after_create_session(Backend& session) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::StopAtStepHook needs a backend with `std::int64_t global_step() "
                  "const`; the backend type is named in this instantiation.");
    if constexpr (HasGlobalStep<Backend>) {
      if (pending_) {
        last_step_ = static_cast<std::int64_t>(session.global_step()) + num_steps_;
        pending_ = false;
      }
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) const {
    // Without global_step() after_create_session has reported the mistake; say it once.
    if constexpr (HasGlobalStep<std::remove_cvref_t<decltype(run_context.session())>>)
      if (static_cast<std::int64_t>(run_context.session().global_step()) >= last_step_)
          [[unlikely]]
        run_context.request_stop();
  }

  // The step at which the hook stops; known after the first after_create_session().
  std::optional<std::int64_t> last_step() const noexcept {
    return pending_ ? std::nullopt : std::optional(last_step_);
  }

 private:
  std::int64_t last_step_;
  std::int64_t num_steps_;
  bool pending_;
};

}  // namespace runhooks
