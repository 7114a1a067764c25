// forwarding_hook: the hook points of a wrapper that passes each call on to the hook it wraps
// (Conditional, Voted, ChiefOnly and their MPI forms), defining exactly the points the wrapped
// hook defines. Needs no engine: it lives with the core's details.
#pragma once

#include <runhooks/detail/config.hpp>

#include <optional>
#include <type_traits>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/near_miss.hpp>
#include <runhooks/session_run_args.hpp>

namespace runhooks::detail {

// One base per hook point, empty when the wrapped hook does not name that point: a wrapper
// member named like a point the hook lacks would be reported by the session as a point that
// does not fit. Derived provides:
//   Hook& inner();                       the wrapped hook
//   bool forwarding() const;             false: skip the call (ChiefOnly on other ranks)
//   decltype(auto) context(Ctx& ctx);    what the wrapped hook sees as its run context
template <class Derived, class Hook, bool = names_begin<Hook>>
struct forward_begin {};
template <class Derived, class Hook>
struct forward_begin<Derived, Hook, true> {
  void begin()
    requires HasBegin<Hook>
  {
    auto& self = static_cast<Derived&>(*this);
    if (self.forwarding()) self.inner().begin();
  }
};

template <class Derived, class Hook, bool = names_after_create_session<Hook>>
struct forward_after_create_session {};
template <class Derived, class Hook>
struct forward_after_create_session<Derived, Hook, true> {
  template <class B>
    requires(HasAfterCreateSession<Hook, B> && !ReadsCoordinator<Hook, B> &&
             !TakesCoordinator<Hook, B>)
  void after_create_session(B& session) {
    auto& self = static_cast<Derived&>(*this);
    if (self.forwarding()) self.inner().after_create_session(session);
  }
  template <class B, class C>
    requires(ReadsCoordinator<Hook, B> && std::is_same_v<C, Coordinator>)
  void after_create_session(B& session, const C& coord) {
    auto& self = static_cast<Derived&>(*this);
    if (self.forwarding()) self.inner().after_create_session(session, coord);
  }
  template <class B, class C>
    requires(TakesCoordinator<Hook, B> && std::is_same_v<C, Coordinator>)
  void after_create_session(B& session, C& coord) {
    auto& self = static_cast<Derived&>(*this);
    if (self.forwarding()) self.inner().after_create_session(session, coord);
  }
};

// Whether a wrapper is MPI's named form (MpiChiefOnly), so that its error says that name;
// specialized by <runhooks/mpi/mpi_chief_only.hpp>.
template <class Wrapper>
inline constexpr bool is_mpi_chief_only = false;

// SessionRunArgs<Fetch<K>...> with every fetch switched off: what a skipped before_run returns,
// so the step's merged type does not depend on the rank. A feed cannot be skipped. Wrapper is
// the wrapper that skips the call, named in the error.
template <class Args, class Wrapper = void>
struct disabled_request;
template <class... Items, class Wrapper>
struct disabled_request<SessionRunArgs<Items...>, Wrapper> {
  static_assert(!is_mpi_chief_only<Wrapper> || (... && is_fetch<Items>),
                "runhooks: a hook whose calls are skipped on some ranks (MpiChiefOnly) must not "
                "feed the backend: the other ranks' steps would miss the feed. Feed from a hook "
                "every rank runs.");
  static_assert(is_mpi_chief_only<Wrapper> || (... && is_fetch<Items>),
                "runhooks: a hook whose calls are skipped on some ranks (ChiefOnly) must not "
                "feed the backend: the other ranks' steps would miss the feed. Feed from a hook "
                "every rank runs.");
  static constexpr SessionRunArgs<Items...> get() {
    if constexpr (sizeof...(Items) == 0)
      return {};
    else
      return SessionRunArgs<Items...>(Items{false}...);
  }
};

template <class Derived, class Hook, bool = names_before_run<Hook>>
struct forward_before_run {};
template <class Derived, class Hook>
struct forward_before_run<Derived, Hook, true> {
  // D: Derived, named through a parameter so that it is looked into only once complete.
  template <class Ctx, class D = Derived>
  auto before_run(Ctx& run_context) -> decltype(std::declval<Hook&>().before_run(
      std::declval<std::remove_reference_t<
          decltype(std::declval<D&>().context(run_context))>&>())) {
    auto& self = static_cast<D&>(*this);
    decltype(auto) context = self.context(run_context);
    using Result = decltype(self.inner().before_run(context));
    if constexpr (std::is_void_v<Result>) {
      if (self.forwarding()) self.inner().before_run(context);
    } else {
      if (self.forwarding()) return self.inner().before_run(context);
      return disabled_request<std::remove_cvref_t<Result>, D>::get();
    }
  }
};

template <class Derived, class Hook, bool = names_after_run<Hook>>
struct forward_after_run {};
template <class Derived, class Hook>
struct forward_after_run<Derived, Hook, true> {
  template <class Ctx, class Values, class D = Derived>
  auto after_run(Ctx& run_context, const Values& run_values)
      -> decltype(std::declval<Hook&>().after_run(
          std::declval<std::remove_reference_t<
              decltype(std::declval<D&>().context(run_context))>&>(),
          run_values)) {
    auto& self = static_cast<D&>(*this);
    decltype(auto) context = self.context(run_context);
    if (self.forwarding()) self.inner().after_run(context, run_values);
  }
};

template <class Derived, class Hook, bool = names_end<Hook>>
struct forward_end {};
template <class Derived, class Hook>
struct forward_end<Derived, Hook, true> {
  template <class B>
    requires HasEnd<Hook, B>
  void end(B& session) {
    auto& self = static_cast<Derived&>(*this);
    if (self.forwarding()) self.inner().end(session);
  }
};

// produced(K) (ProducesKey) of the wrapped hook, so that the hooks after the wrapper read the
// keys an EvaluationHook in it produces. A wrapper that does not forward (ChiefOnly on the other
// ranks, a Conditional that is off) produces nothing.
template <class Derived, class Hook>
struct forward_produced {
  template <KeyType K>
    requires ProducesKey<Hook, K>
  const std::optional<typename K::value_type>& produced(K key) const {
    static const std::optional<typename K::value_type> none;
    auto& self = const_cast<Derived&>(static_cast<const Derived&>(*this));
    if (!self.forwarding()) return none;
    return self.inner().produced(key);
  }
};

template <class Derived, class Hook>
struct forwarding_hook : forward_begin<Derived, Hook>,
                         forward_after_create_session<Derived, Hook>,
                         forward_before_run<Derived, Hook>,
                         forward_after_run<Derived, Hook>,
                         forward_end<Derived, Hook>,
                         forward_produced<Derived, Hook> {
  static_assert(!std::is_final_v<Hook>,
                "runhooks: a hook type must not be final: runhooks derives from it to find every "
                "member named like a hook point.");
  static_assert(check_near_misses<Hook>::value);
};

}  // namespace runhooks::detail
