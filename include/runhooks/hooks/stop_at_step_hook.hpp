// StopAtStepHook: requests a stop once the global step reaches a last step.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/session_run_context.hpp>

namespace runhooks {

struct StopAtStepOptions {
  std::optional<std::int64_t> num_steps{};  // counted from the global step at the first session
  std::optional<std::int64_t> last_step{};

  // Exactly one of the two (TensorFlow's errors), and num_steps at least 0: std::invalid_argument,
  // or a compile error when the options are constexpr.
  constexpr const StopAtStepOptions& validate() const {
    if (!num_steps && !last_step) {
      if (std::is_constant_evaluated()) throw "One of num_steps or last_step must be specified.";
      throw std::invalid_argument("One of num_steps or last_step must be specified.");
    }
    if (num_steps && last_step) {
      if (std::is_constant_evaluated()) throw "Only one of num_steps or last_step can be specified.";
      throw std::invalid_argument("Only one of num_steps or last_step can be specified.");
    }
    if (num_steps && *num_steps < 0) {
      if (std::is_constant_evaluated()) throw "runhooks: StopAtStepOptions::num_steps must be at least 0";
      throw std::invalid_argument("runhooks: StopAtStepOptions::num_steps must be at least 0, got " +
                                  std::to_string(*num_steps) + ".");
    }
    return *this;
  }
};

// Stops once the global step after a run is at least the last step. With num_steps, the last
// step is the global step at the first after_create_session() plus num_steps; it is not re-based
// when the backend is re-created. Per step: one load of the last step and one compare with the
// global step. Unlike TensorFlow it needs no second read: the backend's global_step() is read
// after the step, never stale.
class StopAtStepHook {
 public:
  constexpr explicit StopAtStepHook(StopAtStepOptions options)
      : last_step_(options.validate().last_step.value_or(0)),
        num_steps_(options.num_steps.value_or(-1)), pending_(!options.last_step) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names StopAtStepOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                StopAtStepOptions, &StopAtStepOptions::num_steps, &StopAtStepOptions::last_step>>
  explicit StopAtStepHook(...) = delete;  // Misspelt field? Write StopAtStepOptions{...} to see which

  template <class Backend>
  void after_create_session(Backend& session) {
    static_assert(HasGlobalStep<Backend>,
                  "runhooks::StopAtStepHook needs a backend with `std::int64_t global_step() "
                  "const`; the backend type is named in this instantiation.");
    if constexpr (HasGlobalStep<Backend>) {
      if (pending_) {
        // Saturates: num_steps = INT64_MAX means "never", not a wrapped-around negative step.
        last_step_ =
            detail::saturating_add(static_cast<std::int64_t>(session.global_step()), num_steps_);
        pending_ = false;
      }
    }
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values&) const {
    // Without global_step() after_create_session has reported the mistake; say it once.
    if constexpr (HasGlobalStep<std::remove_cvref_t<decltype(run_context.session())>>)
      if (detail::global_step_of(run_context) >= last_step_)
          [[unlikely]]
        run_context.request_stop();
  }

  // The step at which the hook stops; known after the first after_create_session().
  std::optional<std::int64_t> last_step() const noexcept {
    return pending_ ? std::nullopt : std::optional(last_step_);
  }
  // The options as given. By value: the hook keeps only its per-step state.
  constexpr StopAtStepOptions options() const noexcept {
    if (num_steps_ >= 0) return {.num_steps = num_steps_};
    return {.last_step = last_step_};
  }

 private:
  std::int64_t last_step_;
  std::int64_t num_steps_;  // -1 with last_step (num_steps is at least 0)
  bool pending_;
};

}  // namespace runhooks
