// The on/off hooks of make_training_session: runhooks::chief_only(hooks...), the hooks only the
// chief runs, and Conditional, the wrapper of a hook that is on or off from construction (a
// default hook whose option is off, a chief-only hook on a worker).
#pragma once

#include <runhooks/detail/config.hpp>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <runhooks/concepts.hpp>
#include <runhooks/detail/forwarding_hook.hpp>
#include <runhooks/hook_state.hpp>
#include <runhooks/session/hook_states.hpp>
#include <runhooks/training_session/options.hpp>

namespace runhooks {

// Hooks only the chief runs (TensorFlow's chief_only_hooks):
//   runhooks::make_training_session(options, factory, my_hook, runhooks::chief_only(saver, logger))
template <class... Hooks>
struct ChiefOnlyHooks {
  std::tuple<Hooks...> hooks;
};
template <class... Hooks>
ChiefOnlyHooks<Hooks...> chief_only(Hooks... hooks) {
  return {std::tuple<Hooks...>(std::move(hooks)...)};
}

// A hook that runs only when enabled at construction (a default hook whose option is off, a
// chief-only hook on a worker): every point it defines costs one test of a flag, and a before_run
// that fetches returns its fetches switched off.
template <class Hook>
class Conditional : public detail::forwarding_hook<Conditional<Hook>, detail::unwrap_hook_t<Hook>> {
 public:
  using hook_type = detail::unwrap_hook_t<Hook>;

  explicit Conditional(std::optional<Hook> hook) : hook_(std::move(hook)) {}

  bool enabled() const noexcept { return hook_.has_value(); }
  // The hook, or nullptr when it is off.
  detail::unwrap_hook_t<Hook>* get() noexcept { return hook_ ? &detail::unwrap(*hook_) : nullptr; }
  const detail::unwrap_hook_t<Hook>* get() const noexcept {
    return hook_ ? &detail::unwrap(*hook_) : nullptr;
  }

  detail::unwrap_hook_t<Hook>& inner() noexcept { return detail::unwrap(*hook_); }
  bool forwarding() const noexcept { return hook_.has_value(); }
  template <class Ctx>
  Ctx& context(Ctx& run_context) const noexcept {
    return run_context;
  }

  // runhooks::link_hooks passes on to the hook.
  template <class... Hooks>
  void link(const Hooks&... hooks) {
    if constexpr (requires(detail::unwrap_hook_t<Hook>& h) { h.link(hooks...); })
      if (hook_) inner().link(hooks...);
  }

  // A checkpoint saver (TakesHookStates) stays one: the session gives it the states of its
  // stateful hooks (session/hook_states.hpp), which it saves when it is on.
  void attach_hook_states(HookStateAccess access) noexcept
    requires TakesHookStates<detail::unwrap_hook_t<Hook>>
  {
    if (hook_) inner().attach_hook_states(access);
  }

  // A StopSource (SignalStopHook) stays one when it is on: the session asks it while it creates
  // or re-creates the backend, where no hook point runs.
  bool stop_requested()
    requires StopSource<detail::unwrap_hook_t<Hook>>
  {
    return hook_ && static_cast<bool>(inner().stop_requested());
  }
  std::string stop_reason()
    requires StopSource<detail::unwrap_hook_t<Hook>>
  {
    return hook_ ? std::string(inner().stop_reason()) : std::string();
  }

 private:
  std::optional<Hook> hook_;
};

namespace detail {

template <class T>
inline constexpr bool is_conditional = false;
template <class H>
inline constexpr bool is_conditional<Conditional<H>> = true;

template <Role R, class Hook>
auto chief_only_hook(Hook hook, bool is_chief) {
  if constexpr (R == Role::chief)
    return hook;
  else
    return Conditional<Hook>(is_chief ? std::optional<Hook>(std::move(hook)) : std::nullopt);
}

template <class Hook, class Make>
Conditional<Hook> conditional(bool on, Make make) {
  return Conditional<Hook>(on ? std::optional<Hook>(make()) : std::nullopt);
}

}  // namespace detail

}  // namespace runhooks
