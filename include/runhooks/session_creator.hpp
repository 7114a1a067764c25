// SessionCreator: how a MonitoredSession makes its backend, and when it may make it again.
#pragma once

#include <algorithm>
#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>

namespace runhooks {

// Retry policies decide, after the n-th consecutive AbortedError or UnavailableError
// (failures = n >= 1), whether to re-create the backend and after how many seconds.
//   Minimal complete definition: `std::optional<double> next_delay(int failures) const`,
//   std::nullopt meaning "give up and let the error propagate".

// TensorFlow's rule: retry at once, forever.
struct RetryForever {
  constexpr std::optional<double> next_delay(int) const noexcept { return 0.0; }
};

// At most max_retries consecutive re-creations, waiting initial_backoff_secs, then that times
// multiplier each time, capped at max_backoff_secs.
struct RetryLimit {
  int max_retries = 3;
  double initial_backoff_secs = 0.0;
  double multiplier = 2.0;
  double max_backoff_secs = 60.0;

  constexpr std::optional<double> next_delay(int failures) const noexcept {
    if (failures > max_retries) return std::nullopt;
    double delay = initial_backoff_secs;
    for (int i = 1; i < failures; ++i) delay *= multiplier;
    return std::min(delay, max_backoff_secs);
  }
};

// Never recover: what SingularMonitoredSession uses.
struct NoRecovery {
  constexpr std::optional<double> next_delay(int) const noexcept { return std::nullopt; }
};

template <class P>
concept RetryPolicy = requires(const P& p, int failures) {
  { p.next_delay(failures) } -> std::same_as<std::optional<double>>;
};

// A callable that returns a fresh backend, with the retry rule for re-creating it. A plain
// callable passed to MonitoredSession becomes SessionCreator<F, RetryForever>.
template <BackendFactory Factory, RetryPolicy Policy = RetryForever>
class SessionCreator {
 public:
  using backend_type = std::remove_cvref_t<std::invoke_result_t<Factory&>>;

  constexpr explicit(false) SessionCreator(Factory factory, Policy policy = {})
      : factory_(std::move(factory)), policy_(std::move(policy)) {}

  backend_type create_session() { return factory_(); }
  constexpr const Policy& policy() const noexcept { return policy_; }

 private:
  [[no_unique_address]] Factory factory_;
  [[no_unique_address]] Policy policy_;
};

template <class Factory>
SessionCreator(Factory) -> SessionCreator<Factory>;
template <class Factory, class Policy>
SessionCreator(Factory, Policy) -> SessionCreator<Factory, Policy>;

namespace detail {
template <class T>
inline constexpr bool is_session_creator = false;
template <class F, class P>
inline constexpr bool is_session_creator<SessionCreator<F, P>> = true;

// What MonitoredSession{source, hooks...} stores for `source`: a backend as is, a
// SessionCreator as is, any other callable returning a backend wrapped in SessionCreator with
// the given default policy.
template <class Source, class DefaultPolicy>
struct source_of {
  using type = Source;
};
template <BackendFactory Source, class DefaultPolicy>
  requires(!is_session_creator<Source>)
struct source_of<Source, DefaultPolicy> {
  using type = SessionCreator<Source, DefaultPolicy>;
};
template <class Source, class DefaultPolicy>
using source_of_t = typename source_of<std::remove_cvref_t<Source>, DefaultPolicy>::type;
}  // namespace detail

}  // namespace runhooks
