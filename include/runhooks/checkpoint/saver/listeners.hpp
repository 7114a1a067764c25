// CheckpointSaverHook's listeners (TensorFlow's CheckpointSaverListener): the optional points a
// listener may define, the compile errors for one that does not fit, and how the hook calls them.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include <runhooks/log.hpp>

namespace runhooks {

// Checkpoint listeners (TensorFlow's CheckpointSaverListener) are policy types handed to the hook
// after its options. Each point is optional, found at compile time, and costs nothing if absent:
//   void begin()                                          in the hook's begin()
//   void before_save(auto& session, std::int64_t step)    before each save, on the training thread
//   bool after_save(auto& session, std::int64_t step)     after each save is durable; true asks the
//                                                         session to stop (void: never)
//   void end(auto& session, std::int64_t step)            in the hook's end(), after the final save
// An asynchronous save calls after_save on the training thread once the write is done: in the
// first after_run that sees it done, or in end().
template <class L>
concept ListenerHasBegin = requires(L& l) { l.begin(); };
template <class L, class B>
concept ListenerHasBeforeSave = requires(L& l, B& b, std::int64_t step) { l.before_save(b, step); };
template <class L, class B>
concept ListenerHasAfterSave = requires(L& l, B& b, std::int64_t step) {
  requires std::is_void_v<decltype(l.after_save(b, step))> ||
               std::convertible_to<decltype(l.after_save(b, step)), bool>;
};
template <class L, class B>
concept ListenerHasEnd = requires(L& l, B& b, std::int64_t step) { l.end(b, step); };

namespace detail {

// Does L have a member with this name, whatever its signature (as concepts.hpp finds hook points)?
#define RUNHOOKS_DETAIL_LISTENER_PROBE(point)                                             \
  struct listener_##point##_probe {                                                       \
    void point();                                                                         \
  };                                                                                      \
  template <class L>                                                                      \
  struct listener_##point##_probed : L, listener_##point##_probe {};                      \
  template <class L>                                                                      \
  concept listener_names_##point = std::is_class_v<L> && !std::is_final_v<L> &&           \
                                   !requires { &listener_##point##_probed<L>::point; };
RUNHOOKS_DETAIL_LISTENER_PROBE(begin)
RUNHOOKS_DETAIL_LISTENER_PROBE(before_save)
RUNHOOKS_DETAIL_LISTENER_PROBE(after_save)
RUNHOOKS_DETAIL_LISTENER_PROBE(end)
#undef RUNHOOKS_DETAIL_LISTENER_PROBE

template <class L, class B>
struct check_listener {
  static_assert(!listener_names_begin<L> || ListenerHasBegin<L>,
                "runhooks: a checkpoint listener's begin does not fit. Write `void begin()`.");
  static_assert(!listener_names_before_save<L> || ListenerHasBeforeSave<L, B>,
                "runhooks: a checkpoint listener's before_save does not fit. Write `void "
                "before_save(auto& session, std::int64_t global_step)`.");
  static_assert(!listener_names_after_save<L> || ListenerHasAfterSave<L, B>,
                "runhooks: a checkpoint listener's after_save does not fit. Write `bool "
                "after_save(auto& session, std::int64_t global_step)` (true requests a stop) or "
                "return void.");
  static_assert(!listener_names_end<L> || ListenerHasEnd<L, B>,
                "runhooks: a checkpoint listener's end does not fit. Write `void end(auto& "
                "session, std::int64_t global_step)`.");
  static_assert(ListenerHasBegin<L> || ListenerHasBeforeSave<L, B> ||
                    ListenerHasAfterSave<L, B> || ListenerHasEnd<L, B> ||
                    listener_names_begin<L> || listener_names_before_save<L> ||
                    listener_names_after_save<L> || listener_names_end<L>,
                "runhooks: a checkpoint listener defines none of begin, before_save, after_save, "
                "end; the listener type is named in this instantiation.");
  static constexpr bool value = true;
};

// How the hook calls its listeners. A base of CheckpointSaverHook (Hook), whose listeners it reads
// through self(); it holds nothing itself.
template <class Hook>
class SaverListeners {
 protected:
  Hook& self() noexcept { return static_cast<Hook&>(*this); }

  template <class L>
  static void call_begin(L& listener) {
    if constexpr (ListenerHasBegin<L>) listener.begin();
  }

  template <class L, class Backend>
  static void call_before_save(L& listener, Backend& session, std::int64_t step) {
    if constexpr (ListenerHasBeforeSave<L, Backend>) listener.before_save(session, step);
  }

  template <class L, class Backend>
  static bool call_after_save(L& listener, Backend& session, std::int64_t step) {
    if constexpr (ListenerHasAfterSave<L, Backend>) {
      if constexpr (std::is_void_v<decltype(listener.after_save(session, step))>) {
        listener.after_save(session, step);
      } else if (listener.after_save(session, step)) {
        log(Severity::info, "runhooks: a checkpoint listener requested that training be stopped "
                            "(after the save of step " + std::to_string(step) + ").");
        return true;
      }
    }
    return false;
  }

  template <class L, class Backend>
  static void call_end(L& listener, Backend& session, std::int64_t step) {
    if constexpr (ListenerHasEnd<L, Backend>) listener.end(session, step);
  }

  // Every listener's after_save, none skipped; true if any asked to stop.
  template <class Backend>
  bool after_save(Backend& session, std::int64_t step) {
    return std::apply(
        [&](auto&... l) {
          bool stop = false;
          ((stop = call_after_save(l, session, step) || stop), ...);  // call first, then or
          return stop;
        },
        self().listeners_);
  }
};

}  // namespace detail

}  // namespace runhooks
