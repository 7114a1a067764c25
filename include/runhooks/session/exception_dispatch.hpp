// The on_exception hook point's dispatch: which escaping exceptions the hooks see, in which
// order, and why a handler's own failure never replaces the exception that is propagating.
#pragma once

#include <runhooks/detail/config.hpp>

#include <exception>
#include <string>
#include <type_traits>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/describe_exception.hpp>
#include <runhooks/detail/type_name.hpp>
#include <runhooks/error.hpp>
#include <runhooks/log.hpp>

namespace runhooks::detail {

// Whether any of the hooks defines on_exception for this backend: only then do run(),
// run_step_fn() and should_stop() catch anything, so that other sessions compile as before.
template <class Backend, class... Hooks>
inline constexpr bool any_on_exception = (... || HasOnException<unwrap_hook_t<Hooks>, Backend>);

// The clean ends of a loop (run_loop ends on them without an error): not an exception to report.
inline bool is_clean_end(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const OutOfRangeError&) {
    return true;
  } catch (const StopIteration&) {
    return true;
  } catch (...) {
    return false;
  }
}


// Calls every hook's on_exception(backend, error) in declaration order. A handler that throws is
// logged, naming the hook, and the next one is called: the exception that is leaving run() is
// the one the caller receives (the session rethrows it after this returns). Out of line and
// cold: it runs once, on the way out.
template <class Backend, class ForEachHook>
[[gnu::noinline, gnu::cold]] void dispatch_on_exception(Backend& backend,
                                                        const std::exception_ptr& error,
                                                        ForEachHook&& for_each_hook) noexcept {
  if (!error || is_clean_end(error)) return;
  for_each_hook([&](auto& hook) {
    using Hook = std::remove_cvref_t<decltype(hook)>;
    if constexpr (HasOnException<Hook, Backend>) {
      try {
        hook.on_exception(backend, error);
      } catch (...) {
        try {
          log(Severity::warning, "runhooks: " + std::string(type_name<Hook>()) +
                                   "::on_exception threw while handling '" +
                                   describe_exception(error) + "': " +
                                   describe_exception(std::current_exception()) +
                                   "; the original exception propagates.");
        } catch (...) {  // the log sink threw, or out of memory: the original still propagates
        }
      }
    }
  });
}

}  // namespace runhooks::detail
