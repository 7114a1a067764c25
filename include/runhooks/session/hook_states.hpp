// The session's part in hook state in the checkpoint: it gives a checkpoint saver among its hooks
// the states of its stateful hooks, and has its session creator restore them after the backend.
#pragma once

#include <runhooks/detail/config.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <runhooks/hook_state.hpp>

namespace runhooks {

// A hook that saves the session's hook states with its checkpoints (CheckpointSaverHook, and
// make_training_session's Conditional holding one).
template <class H>
concept TakesHookStates = requires(H& hook, HookStateAccess access) {
  hook.attach_hook_states(access);
};

// A session creator that restores them with its backend (ChiefSessionCreator,
// TrainingSessionCreator).
template <class Creator>
concept RestoresHookStates = requires(Creator& creator, HookStateAccess access) {
  creator.restore_hook_states(access);
};

namespace detail {

// The states are read when a save starts, after the after_run of every hook declared before the
// saver: a stateful hook declared after it would be saved one step behind its backend.
template <class... Hooks>
inline constexpr bool hook_states_ordered = [] {
  constexpr bool saver[] = {TakesHookStates<Hooks>..., false};
  constexpr bool stateful[] = {StatefulHook<Hooks>..., false};
  bool saver_seen = false;
  for (std::size_t i = 0; i < sizeof...(Hooks); ++i) {
    if (stateful[i] && saver_seen) return false;
    saver_seen = saver_seen || saver[i];
  }
  return true;
}();

// Hook states: a base of BasicMonitoredSession (Session), whose hooks it reaches through self();
// it holds nothing itself. Everything here runs at creation, at a save and at a restore; nothing
// on the step. A session without a stateful hook attaches nothing (its saver writes no .hooks),
// and restores as the creator finds: none, or a file naming a hook it lacks (an error).
template <class Session>
class SessionHookStates {
 protected:
  Session& self() noexcept { return static_cast<Session&>(*this); }

  // The stateful hooks, by reference, in declaration order.
  auto stateful_hooks() {
    return [this]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple_cat([this]() {
        auto& hook = self().template hook<I>();
        if constexpr (StatefulHook<std::remove_cvref_t<decltype(hook)>>)
          return std::tie(hook);
        else
          return std::tuple<>{};
      }()...);
    }(std::make_index_sequence<Session::hook_count>{});
  }

  HookStateAccess hook_state_access() noexcept {
    return {static_cast<SessionHookStates*>(this), Session::stateful_hook_count,
            [](void* session) {
              return std::apply([](auto&... hooks) { return encode_hook_states(hooks...); },
                                static_cast<SessionHookStates*>(session)->stateful_hooks());
            },
            [](void* session, std::string_view text) {
              std::apply([&](auto&... hooks) { decode_hook_states(text, hooks...); },
                         static_cast<SessionHookStates*>(session)->stateful_hooks());
            }};
  }

  // In the constructor, before any begin(): the names checked.
  void check_hook_states() {
    if constexpr (Session::stateful_hook_count > 0)
      std::apply([](auto&... hooks) {
        check_hook_state_names<std::remove_cvref_t<decltype(hooks)>...>();
      }, stateful_hooks());
  }

  // In the constructor, after every begin() and before the backend is made: the saver given the
  // states. Not before: a constructor that throws runs no destructor, so a saver held by std::ref
  // would keep the access to a session that never was (a failed creation gives it back:
  // SessionRecovery::creation_failed).
  void attach_hook_states() {
    if constexpr (Session::stateful_hook_count > 0) {
      const HookStateAccess access = hook_state_access();
      self().for_each_hook([&](auto& hook) {
        if constexpr (TakesHookStates<std::remove_cvref_t<decltype(hook)>>)
          hook.attach_hook_states(access);
      });
    }
  }

  // In the destructor: a saver passed by std::ref outlives the session.
  void detach_hook_states() noexcept {
    if constexpr (Session::stateful_hook_count > 0)
      self().for_each_hook([&](auto& hook) {
        if constexpr (TakesHookStates<std::remove_cvref_t<decltype(hook)>>)
          hook.attach_hook_states(HookStateAccess{});
      });
  }

  // After the creator restored a fresh backend, before any after_create_session: on start and on
  // every recovery, the hooks go back to the states saved with that checkpoint.
  void restore_hook_states() {
    if constexpr (requires { self().slot_.creator; }) {
      if constexpr (RestoresHookStates<std::remove_cvref_t<decltype(self().slot_.creator)>>)
        self().slot_.creator.restore_hook_states(hook_state_access());
    }
  }
};

}  // namespace detail

}  // namespace runhooks
