// Whether a monitored metric is better lower or higher: the key's declared direction, the mode
// tags that put a hook's mode in its type, and the one rule the monitoring hooks
// (EarlyStoppingHook, ReduceLROnPlateauHook, BestCheckpointHook) share to choose their mode.
#pragma once

#include <runhooks/detail/config.hpp>

#include <concepts>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <runhooks/keys.hpp>

namespace runhooks {

// Whether a smaller or a larger metric is better.
enum class MetricMode { min, max };

// A key may declare which is better, beside its name:
//   struct Accuracy : runhooks::Key<float> {
//     static constexpr runhooks::MetricMode direction = runhooks::MetricMode::max;
//   };
// and the hooks that monitor it then take their mode from it (Keras instead guesses from the
// metric's name at run time, and raises for a name it does not know).
template <class K>
concept DeclaresDirection = requires {
  { K::direction } -> std::convertible_to<MetricMode>;
};

template <KeyType K>
constexpr std::optional<MetricMode> key_direction() noexcept {
  if constexpr (DeclaresDirection<K>)
    return static_cast<MetricMode>(K::direction);
  else
    return std::nullopt;
}

// A mode in a monitoring hook's type, passed to its constructor:
//   runhooks::EarlyStoppingHook hook{runhooks::keys<Accuracy>, runhooks::maximize, {.patience = 3}};
// A key that declares the other direction is then a compile error, however the hook is made.
template <MetricMode M>
struct MetricModeTag {
  static constexpr MetricMode mode = M;
};
using Minimize = MetricModeTag<MetricMode::min>;
using Maximize = MetricModeTag<MetricMode::max>;
inline constexpr Minimize minimize{};
inline constexpr Maximize maximize{};

// A monitoring hook's default second template argument: no tag; the mode is the options' (checked
// against the key's direction when the hook is made), else the key's direction, else min.
struct ModeFromOptions {};

template <class T>
concept ModeTag = std::same_as<T, Minimize> || std::same_as<T, Maximize>;
template <class T>
concept HookMode = ModeTag<T> || std::same_as<T, ModeFromOptions>;

namespace detail {
constexpr const char* mode_name(MetricMode mode) noexcept {
  return mode == MetricMode::min ? "min" : "max";
}

template <class...>
inline constexpr bool always_false_mode = false;

// Instantiated only for a tag that contradicts the key's declared direction: the error names the
// key and its direction as this template's arguments.
template <class Key, MetricMode Direction>
struct mode_tag_contradicts_key;
template <class Key>
struct mode_tag_contradicts_key<Key, MetricMode::max> {
  static_assert(always_false_mode<Key>,
                "runhooks: runhooks::minimize given for a key that declares direction max "
                "(higher is better): pass runhooks::maximize, or no tag to use the key's direction.");
};
template <class Key>
struct mode_tag_contradicts_key<Key, MetricMode::min> {
  static_assert(always_false_mode<Key>,
                "runhooks: runhooks::maximize given for a key that declares direction min "
                "(lower is better): pass runhooks::minimize, or no tag to use the key's direction.");
};

// The error above where a tag contradicts the key's direction, else an empty struct: a monitoring
// hook's class body asserts `sizeof(mode_check_t<MetricKey, Mode>) > 0` (one error, not two).
struct mode_fits_key {};
template <KeyType Key, HookMode Mode>
struct mode_check {
  using type = mode_fits_key;
};
template <KeyType Key, HookMode Mode>
  requires ModeTag<Mode> && DeclaresDirection<Key> &&
           (Mode::mode != static_cast<MetricMode>(Key::direction))
struct mode_check<Key, Mode> {
  using type = mode_tag_contradicts_key<Key, static_cast<MetricMode>(Key::direction)>;
};
template <KeyType Key, HookMode Mode>
using mode_check_t = typename mode_check<Key, Mode>::type;

// The mode a monitoring hook uses. With a tag: the tag's, and options' mode, when given, must
// agree with it. Without: the options' if given, else the key's direction, else min; a given mode
// that contradicts the key's direction is std::invalid_argument naming the option, the key and
// both modes, and a compile error where evaluated at compile time (constexpr options:
// `static_assert((options.validate_for<Accuracy>(), true));`).
template <KeyType K, HookMode Mode = ModeFromOptions>
constexpr MetricMode resolve_mode(std::optional<MetricMode> mode, const char* option) {
  if constexpr (ModeTag<Mode>) {
    if (mode && *mode != Mode::mode) {
      if (std::is_constant_evaluated())
        throw "runhooks: the options' mode contradicts the hook's mode tag";
      throw std::invalid_argument("runhooks: " + std::string(option) + " is " + mode_name(*mode) +
                                  ", but the hook's mode tag is runhooks::" +
                                  (Mode::mode == MetricMode::min ? "minimize." : "maximize."));
    }
    return Mode::mode;
  } else {
    constexpr std::optional<MetricMode> declared = key_direction<K>();
    if (mode && declared && *mode != *declared) {
      if (std::is_constant_evaluated())
        throw "runhooks: the options' mode contradicts the direction the key declares";
      throw std::invalid_argument("runhooks: " + std::string(option) + " is " + mode_name(*mode) +
                                  ", but the key " + std::string(key_name<K>()) +
                                  " declares direction " + mode_name(*declared) + ".");
    }
    return mode ? *mode : declared.value_or(MetricMode::min);
  }
}
}  // namespace detail

}  // namespace runhooks
