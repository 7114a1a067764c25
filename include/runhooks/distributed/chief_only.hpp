// ChiefOnly: a hook that runs on the chief (rank 0) only, as TensorFlow's chief_only_hooks, on
// any engine.
#pragma once

#include <runhooks/detail/config.hpp>

#include <string>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/forwarding_hook.hpp>
#include <runhooks/distributed/collective.hpp>
#include <runhooks/hook_state.hpp>

namespace runhooks {

namespace detail {

// The rule, once for every engine's wrapper (ChiefOnly, MpiChiefOnly): forward every call to the
// wrapped hook on the chief, skip it elsewhere. Derived is the wrapper, so that a compile error
// names it (forwarding_hook's disabled_request).
template <class Derived, class Hook>
class chief_only_base : public forwarding_hook<Derived, unwrap_hook_t<Hook>> {
  using inner_type = unwrap_hook_t<Hook>;

 public:
  chief_only_base(Hook hook, bool is_chief) : hook_(std::move(hook)), chief_(is_chief) {}

  // StatefulHook, as the wrapped hook is one (hook_state.hpp): the chief's checkpoint carries
  // its state (the other ranks' is that of a hook never called).
  static std::string state_name()
    requires StatefulHook<inner_type>
  {
    return inner_type::state_name();
  }
  auto state() const
    requires StatefulHook<inner_type>
  {
    return unwrap(const_cast<Hook&>(hook_)).state();
  }
  template <class State>
    requires StatefulHook<inner_type> && requires(inner_type& h, const State& s) { h.restore(s); }
  void restore(const State& state) {
    inner().restore(state);
  }

  bool is_chief() const noexcept { return chief_; }

  unwrap_hook_t<Hook>& inner() noexcept { return unwrap(hook_); }
  bool forwarding() const noexcept { return chief_; }
  template <class Ctx>
  Ctx& context(Ctx& run_context) const noexcept {
    return run_context;
  }

 private:
  Hook hook_;
  bool chief_;
};

}  // namespace detail

// Wraps a hook that only the chief should run: checkpoint saving, summaries, step-rate logs
// (TensorFlow's MonitoredTrainingSession gives these to the chief alone). Every rank builds the
// same session type; on the other ranks each call of the wrapped hook is skipped (one test of a
// flag per hook point), and a before_run that fetches returns its fetches switched off, so no
// rank computes what it would not use. A wrapped hook may not feed the backend: the other ranks
// would miss the feed (a compile error).
template <class Hook>
class ChiefOnly : public detail::chief_only_base<ChiefOnly<Hook>, Hook> {
 public:
  // The chief is rank 0 of the collective's group.
  template <Collective C>
  ChiefOnly(Hook hook, const C& collective)
      : detail::chief_only_base<ChiefOnly<Hook>, Hook>(std::move(hook), collective.rank() == 0) {}
  ChiefOnly(Hook hook, bool is_chief)
      : detail::chief_only_base<ChiefOnly<Hook>, Hook>(std::move(hook), is_chief) {}
};

}  // namespace runhooks
