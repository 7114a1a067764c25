// NanTensorHook: stops training, or fails it, when the loss is NaN.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cmath>
#include <string>
#include <type_traits>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/hook_keys.hpp>
#include <runhooks/detail/no_constructor_fits.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks {

// TensorFlow's NanLossDuringTrainingError: the loss was NaN and fail_on_nan_loss was set.
class NanLossDuringTrainingError : public Error {
 public:
  NanLossDuringTrainingError() : Error("NaN loss during training.") {}
};

struct NanTensorOptions {
  // Throw NanLossDuringTrainingError (true, TensorFlow's default) or log and request a stop.
  bool fail_on_nan_loss = true;
  // Keras' TerminateOnNaN test: +inf and -inf count as NaN does. Off by default (TensorFlow's
  // np.isnan).
  bool inf_too = false;
};

// TensorFlow's NanTensorHook. Fetches LossKey on every step, as TensorFlow does, and when it is
// NaN logs "Model diverged with loss = NaN." and then throws NanLossDuringTrainingError (which
// ends the loop without end(), as any error does), or, with fail_on_nan_loss = false, requests
// a stop (a clean end). Only NaN counts, as TensorFlow's np.isnan: an infinite loss does not,
// unless inf_too is set (Keras' TerminateOnNaN: np.isnan or np.isinf), and then the line says
// "loss = inf" or "loss = -inf".
// Per step: the fetch (shared with any other hook or caller fetching LossKey) and one compare.
// Differs from TensorFlow: the failure is logged at warning level (runhooks::log has no error
// level).
template <KeyType LossKey>
class NanTensorHook {
  static_assert(std::is_floating_point_v<typename LossKey::value_type>,
                "runhooks::NanTensorHook watches a floating-point loss: its key's value_type "
                "must be float, double or long double.");

 public:
  constexpr explicit NanTensorHook(NanTensorOptions options = {}) noexcept : options_(options) {}
  // Chosen when no other constructor fits, most often for braced options with a misspelt field:
  // the error names NanTensorOptions and its fields (detail/no_constructor_fits.hpp).
  template <class Hint = detail::write_the_options_type<
                NanTensorOptions, &NanTensorOptions::fail_on_nan_loss, &NanTensorOptions::inf_too>>
  explicit NanTensorHook(...) = delete;  // Misspelt field? Write NanTensorOptions{...} to see which

  template <class Backend>
  void after_create_session(Backend&) {
    static_assert(detail::check_hook_keys<NanTensorHook, Backend, LossKey>());
  }

  template <class Ctx>
  auto before_run(Ctx& run_context) const {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (detail::fetches_all<Backend, LossKey>)
      return SessionRunArgs{runhooks::fetch<LossKey>()};
  }

  template <class Ctx, class Values>
  void after_run(Ctx& run_context, const Values& run_values) const {
    using Backend = std::remove_cvref_t<decltype(run_context.session())>;
    if constexpr (detail::fetches_all<Backend, LossKey>) {
      const auto& loss = run_values[LossKey{}];
      // Unordered with itself: one compare. A loss the session did not fetch cannot happen.
      if (loss && (std::isnan(*loss) || (options_.inf_too && std::isinf(*loss)))) [[unlikely]]
        if (diverged(std::isnan(*loss) ? "NaN" : *loss > 0 ? "inf" : "-inf")) run_context.request_stop();
    }
  }

  const NanTensorOptions& options() const noexcept { return options_; }

 private:
  // Throws, or returns true: stop. Takes no run context, so that the context need not live in
  // memory on the other steps.
  [[gnu::noinline]] bool diverged(const char* what) const {
    log(Severity::warning, std::string("Model diverged with loss = ") + what + ".");
    if (options_.fail_on_nan_loss) throw NanLossDuringTrainingError();
    return true;
  }

  NanTensorOptions options_;
};

}  // namespace runhooks
