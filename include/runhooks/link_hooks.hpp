// runhooks::link_hooks(session): lets hooks that look for another hook of their session find it.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>

namespace runhooks {

template <class Source, class... Hooks>
class MonitoredSession;
template <class Source, class... Hooks>
class SingularMonitoredSession;

namespace detail {
template <class Session>
struct session_hook_count;
template <class Source, class... Hooks>
struct session_hook_count<MonitoredSession<Source, Hooks...>>
    : std::integral_constant<std::size_t, sizeof...(Hooks)> {};
template <class Source, class... Hooks>
struct session_hook_count<SingularMonitoredSession<Source, Hooks...>>
    : std::integral_constant<std::size_t, sizeof...(Hooks)> {};
}  // namespace detail

// Calls `hook.link(hooks...)` with every hook of the session (unwrapped from std::ref), for each
// hook that has such a member: ProgressBarHook finds a StopAtStepHook this way, by type, at
// compile time, and keeps a pointer to it (hooks live inside the session, which never moves).
// Call it once, right after constructing the session; make_training_session does.
template <class Session>
void link_hooks(Session& session) {
  constexpr std::size_t count = detail::session_hook_count<std::remove_cv_t<Session>>::value;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    auto link_one = [&](auto& hook) {
      if constexpr (requires { hook.link(session.template hook<I>()...); })
        hook.link(session.template hook<I>()...);
    };
    (link_one(session.template hook<I>()), ...);
  }(std::make_index_sequence<count>{});
}

}  // namespace runhooks
