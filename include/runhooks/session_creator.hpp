// Session creators: how a MonitoredSession makes its backend, and when it may make it again.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/checked.hpp>

namespace runhooks {

// Retry policies decide, after the n-th consecutive AbortedError or UnavailableError
// (failures = n >= 1), whether to re-create the backend and after how many seconds.
//   Minimal complete definition: `std::optional<double> next_delay(int failures) const`,
//   std::nullopt meaning "give up and let the error propagate". The session checks every delay
//   (finite, 0 to 1e9 s) and throws std::invalid_argument naming the policy's value otherwise.

// TensorFlow's rule: retry at once, forever.
struct RetryForever {
  constexpr std::optional<double> next_delay(int) const noexcept { return 0.0; }
};

// At most max_retries consecutive re-creations, waiting initial_backoff_secs, then that times
// multiplier each time, capped at max_backoff_secs. validate() (called by the session before
// its first creation) rejects a negative max_retries, a multiplier below 1, and back-offs that
// are negative, not finite or above 1e9 s, naming the field and its value.
struct RetryLimit {
  int max_retries = 3;
  double initial_backoff_secs = 0.0;
  double multiplier = 2.0;
  double max_backoff_secs = 60.0;

  void validate() const {
    if (max_retries < 0)
      throw std::invalid_argument("runhooks: RetryLimit::max_retries must be at least 0, got " +
                                  std::to_string(max_retries) + ".");
    detail::checked_secs("RetryLimit::initial_backoff_secs", initial_backoff_secs);
    detail::checked_secs("RetryLimit::max_backoff_secs", max_backoff_secs);
    if (!(multiplier >= 1.0 && multiplier <= detail::max_duration_secs))
      throw std::invalid_argument("runhooks: RetryLimit::multiplier must be at least 1 and at most 1e9, got " +
                                  detail::format_number(multiplier) + ".");
  }

  constexpr std::optional<double> next_delay(int failures) const noexcept {
    if (failures > max_retries) return std::nullopt;
    double delay = initial_backoff_secs;
    for (int i = 1; i < failures && delay < max_backoff_secs; ++i) delay *= multiplier;
    return delay < max_backoff_secs ? delay : max_backoff_secs;
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

// What a MonitoredSession accepts as its source when it may re-create the backend.
//   Minimal complete definition: `using backend_type = ...;`, `backend_type create_session()`
//   and `const Policy& policy() const` returning a RetryPolicy.
//   Optional: `void initialize(backend_type&)`, called on every fresh backend before any hook's
//   after_create_session (TensorFlow's init ops and checkpoint restore: see
//   <runhooks/checkpoint/...>); an error there is handled like one from create_session().
template <class C>
concept SessionCreatorType = requires(C& c, const C& cc) {
  typename C::backend_type;
  { c.create_session() } -> std::same_as<typename C::backend_type>;
  { cc.policy() } -> RetryPolicy;
};

// A callable that returns a fresh backend, with the retry rule for re-creating it. A plain
// callable passed to MonitoredSession becomes SessionCreator<F, RetryForever>.
template <BackendFactory Factory, RetryPolicy Policy = RetryForever>
class SessionCreator {
 public:
  using backend_type = std::remove_cvref_t<std::invoke_result_t<Factory&>>;

  constexpr explicit(false) SessionCreator(Factory factory, Policy policy = {})
      : factory_(std::move(factory)), policy_(std::move(policy)) {
    if constexpr (requires { policy_.validate(); }) policy_.validate();
  }

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

// What MonitoredSession{source, hooks...} stores for `source`: a backend as is, a session
// creator as is, any other callable returning a backend wrapped in SessionCreator with the given
// default policy.
template <class Source, class DefaultPolicy>
struct source_of {
  using type = Source;
};
template <BackendFactory Source, class DefaultPolicy>
  requires(!SessionCreatorType<Source>)
struct source_of<Source, DefaultPolicy> {
  using type = SessionCreator<Source, DefaultPolicy>;
};
template <class Source, class DefaultPolicy>
using source_of_t = typename source_of<std::remove_cvref_t<Source>, DefaultPolicy>::type;
}  // namespace detail

}  // namespace runhooks
