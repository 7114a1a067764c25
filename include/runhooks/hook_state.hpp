// Hook state in the checkpoint: the StatefulHook concept, and the text the states of a session's
// stateful hooks are saved as (<checkpoint>.hooks) and strictly read back from.
#pragma once

#include <runhooks/detail/config.hpp>

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace runhooks {

namespace detail {

// Converts to any field type: counts an aggregate's fields by brace-initialising it.
struct any_state_field {
  template <class T>
  constexpr operator T() const noexcept;  // only in unevaluated operands
};

template <class S, std::size_t... I>
constexpr bool braces_with(std::index_sequence<I...>) {
  return requires { S{(static_cast<void>(I), any_state_field{})...}; };
}

inline constexpr std::size_t max_state_fields = 8;

template <class S>
constexpr std::size_t state_field_count() {
  std::size_t n = 0;
  [&]<std::size_t... N>(std::index_sequence<N...>) {
    ((braces_with<S>(std::make_index_sequence<N + 1>{}) ? n = N + 1 : n), ...);
  }(std::make_index_sequence<max_state_fields>{});
  return n;
}

// The fields of a state aggregate, as a tuple of references.
template <class S>
constexpr auto state_fields(S& s) {
  constexpr std::size_t n = state_field_count<std::remove_const_t<S>>();
  if constexpr (n == 1) { auto& [a] = s; return std::tie(a); }
  else if constexpr (n == 2) { auto& [a, b] = s; return std::tie(a, b); }
  else if constexpr (n == 3) { auto& [a, b, c] = s; return std::tie(a, b, c); }
  else if constexpr (n == 4) { auto& [a, b, c, d] = s; return std::tie(a, b, c, d); }
  else if constexpr (n == 5) { auto& [a, b, c, d, e] = s; return std::tie(a, b, c, d, e); }
  else if constexpr (n == 6) { auto& [a, b, c, d, e, f] = s; return std::tie(a, b, c, d, e, f); }
  else if constexpr (n == 7) { auto& [a, b, c, d, e, f, g] = s; return std::tie(a, b, c, d, e, f, g); }
  else { auto& [a, b, c, d, e, f, g, h] = s; return std::tie(a, b, c, d, e, f, g, h); }
}

// A list of numbers (a window of values, as SpikeHook's): one field, spelled "[1.5,2,nan]".
template <class T>
inline constexpr bool is_state_list = false;
template <class T>
inline constexpr bool is_state_list<std::vector<T>> = std::is_arithmetic_v<T> &&
                                                      !std::is_same_v<T, bool>;

template <class T>
concept state_field = std::is_arithmetic_v<T> || std::is_enum_v<T> || is_state_list<T>;

template <class S>
constexpr bool all_fields_encodable() {
  if constexpr (!std::is_aggregate_v<S> || !std::is_default_constructible_v<S> ||
                state_field_count<S>() == 0)
    return false;
  else
    return []<class... F>(std::tuple<F&...>*) {
      return (... && state_field<std::remove_cvref_t<F>>);
    }(static_cast<decltype(state_fields(std::declval<S&>()))*>(nullptr));
}

// An aggregate of 1 to 8 numbers, bools, enums or std::vectors of numbers (each hook's small
// state struct).
template <class S>
concept EncodableState = std::is_class_v<S> && all_fields_encodable<S>();

}  // namespace detail

// A hook whose state a checkpoint carries (issue 27, item 9). Minimal complete definition:
//   static std::string state_name();     stable across builds and runs, unique in a session
//                                         (the type and what tells two apart, e.g. its key);
//   S state() const;                      an aggregate of 1-8 fields: numbers, bools, enums, or
//                                         std::vector of numbers (a window of values);
//   void restore(const S&);               after begin(), before after_create_session(); throws
//                                         std::invalid_argument for a state it cannot have written.
// Models: EarlyStoppingHook, ReduceLROnPlateauHook, TimeLimitHook, SpikeHook. A session holding one and a
// CheckpointSaverHook saves every such state in each checkpoint, and restores them with the
// backend (session/recovery.hpp, checkpoint/chief_session_creator.hpp); nothing on the step.
template <class H>
concept StatefulHook = requires(H& hook, const H& c) {
  { H::state_name() } -> std::convertible_to<std::string>;
  hook.restore(c.state());
} && detail::EncodableState<std::remove_cvref_t<decltype(std::declval<const H&>().state())>>;

// The session's stateful hooks, seen by the checkpoint code without their types: what a save
// writes and what a restore reads. Made by the session (it lives as long as the session).
struct HookStateAccess {
  void* session = nullptr;
  std::size_t count = 0;  // of stateful hooks
  std::string (*encode)(void* session) = nullptr;
  // Throws std::invalid_argument with the cause; restores nothing unless every state parses.
  void (*decode)(void* session, std::string_view text) = nullptr;
  explicit operator bool() const noexcept { return session != nullptr; }
};

// The suffix of a checkpoint's hook-state file: <prefix>.hooks.
inline constexpr std::string_view hook_state_suffix = ".hooks";

namespace detail {

inline constexpr std::string_view hook_state_header = "runhooks-hook-states 1";
inline constexpr std::size_t max_hook_state_bytes = std::size_t{1} << 20;

template <class T>
void append_scalar_field(std::string& out, T value) {
  char buffer[64];
  std::to_chars_result r;
  if constexpr (std::is_same_v<T, bool>) {
    out += value ? '1' : '0';
    return;
  } else if constexpr (std::is_enum_v<T>) {
    r = std::to_chars(buffer, buffer + sizeof buffer, static_cast<std::underlying_type_t<T>>(value));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(value)) {  // one spelling, whatever the sign and payload
      out += "nan";
      return;
    }
    r = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest exact round trip
  } else {
    r = std::to_chars(buffer, buffer + sizeof buffer, value);
  }
  out.append(buffer, r.ptr);
}

template <class T>
bool parse_scalar_field(std::string_view token, T& value) {
  if (token.empty()) return false;
  const char* end = token.data() + token.size();
  if constexpr (std::is_same_v<T, bool>) {
    if (token != "0" && token != "1") return false;
    value = token == "1";
    return true;
  } else if constexpr (std::is_enum_v<T>) {
    std::underlying_type_t<T> raw{};
    const auto r = std::from_chars(token.data(), end, raw);
    if (r.ec != std::errc() || r.ptr != end) return false;
    value = static_cast<T>(raw);
    return true;
  } else if constexpr (std::is_floating_point_v<T>) {
    if (token == "nan") {
      value = std::numeric_limits<T>::quiet_NaN();
      return true;
    }
    if (token == "inf" || token == "-inf") {
      value = token[0] == '-' ? -std::numeric_limits<T>::infinity()
                              : std::numeric_limits<T>::infinity();
      return true;
    }
    const auto r = std::from_chars(token.data(), end, value);
    return r.ec == std::errc() && r.ptr == end && std::isfinite(value);
  } else {
    const auto r = std::from_chars(token.data(), end, value);
    return r.ec == std::errc() && r.ptr == end;
  }
}

template <class T>
void append_field(std::string& out, const T& value) {
  if constexpr (is_state_list<T>) {
    out += '[';
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ',';
      append_field(out, value[i]);
    }
    out += ']';
    return;
  } else {
    append_scalar_field(out, value);
  }
}

// One token in full, or false.
template <class T>
bool parse_field(std::string_view token, T& value) {
  if constexpr (is_state_list<T>) {
    if (token.size() < 2 || token.front() != '[' || token.back() != ']') return false;
    token = token.substr(1, token.size() - 2);
    value.clear();
    if (token.empty()) return true;
    for (;;) {
      const std::size_t comma = token.find(',');
      typename T::value_type element{};
      if (!parse_field(token.substr(0, comma), element)) return false;
      value.push_back(element);
      if (comma == std::string_view::npos) return true;
      token.remove_prefix(comma + 1);
    }
  } else {
    return parse_scalar_field(token, value);
  }
}

template <class H>
using hook_state_t = std::remove_cvref_t<decltype(std::declval<const H&>().state())>;

template <class H>
void encode_hook_state(std::string& out, const H& hook) {
  const hook_state_t<H> state = hook.state();
  out += H::state_name();
  out += ' ';
  out += std::to_string(state_field_count<hook_state_t<H>>());
  std::apply([&](const auto&... field) { ((out += ' ', append_field(out, field)), ...); },
             state_fields(state));
  out += '\n';
}

// A hook name as the file spells it: printable ASCII without spaces.
inline bool valid_state_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 200) return false;
  for (const char c : name)
    if (c <= ' ' || c > '~') return false;
  return true;
}

// "'name'" with anything unprintable escaped, for messages about an untrusted file.
inline std::string quoted_state_name(std::string_view name) {
  std::string out = "'";
  for (const char c : name.substr(0, 200)) {
    if (c >= ' ' && c <= '~' && c != '\'') {
      out += c;
    } else {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[(static_cast<unsigned char>(c) >> 4) & 15];
      out += hex[static_cast<unsigned char>(c) & 15];
    }
  }
  if (name.size() > 200) out += "...";
  return out + "'";
}

[[noreturn]] inline void bad_hook_states(const std::string& why) { throw std::invalid_argument(why); }

// Splits `line` at single spaces; an empty token (two spaces, a leading or trailing one) is kept
// empty, so the caller refuses it.
inline std::vector<std::string_view> state_tokens(std::string_view line) {
  std::vector<std::string_view> tokens;
  std::size_t start = 0;
  for (;;) {
    const std::size_t space = line.find(' ', start);
    tokens.push_back(line.substr(start, space == std::string_view::npos ? std::string_view::npos
                                                                         : space - start));
    if (space == std::string_view::npos) return tokens;
    start = space + 1;
  }
}

// The lines of a hook-state file, the header and the end line checked: one line per hook.
inline std::vector<std::string_view> hook_state_lines(std::string_view text) {
  if (text.size() > max_hook_state_bytes)
    bad_hook_states("it is larger than " + std::to_string(max_hook_state_bytes) +
                    " bytes, which no runhooks save writes");
  if (text.empty() || text.back() != '\n')
    bad_hook_states("it is truncated (it does not end with the line 'end')");
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t nl = text.find('\n', start);
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  if (lines.front() != hook_state_header)
    bad_hook_states("its first line is not '" + std::string(hook_state_header) +
                    "' (another program's file, or another version's)");
  if (lines.back() != "end") bad_hook_states("it is truncated (it does not end with the line 'end')");
  return {lines.begin() + 1, lines.end() - 1};
}

// Parses one hook's line (its name already matched) into its state.
template <class H>
hook_state_t<H> decode_hook_state(const std::vector<std::string_view>& tokens) {
  using S = hook_state_t<H>;
  constexpr std::size_t n = state_field_count<S>();
  const std::string name = H::state_name();
  if (tokens.size() != n + 2 || tokens[1] != std::to_string(n))
    bad_hook_states("the state of hook " + quoted_state_name(name) + " has " +
                    (tokens.size() >= 2 ? std::to_string(tokens.size() - 2) : std::string("no")) +
                    " values where this build's has " + std::to_string(n) +
                    " (a hook of another version, or a damaged file)");
  S state{};
  std::size_t i = 2;
  std::apply(
      [&](auto&... field) {
        (([&] {
           if (!parse_field(tokens[i], field))
             bad_hook_states("the state of hook " + quoted_state_name(name) + " has value " +
                             std::to_string(i - 1) + " " + quoted_state_name(tokens[i]) +
                             ", which is not a valid " +
                             (std::is_same_v<std::remove_cvref_t<decltype(field)>, bool>
                                  ? "bool (0 or 1)"
                              : is_state_list<std::remove_cvref_t<decltype(field)>>
                                  ? "list of numbers ([1,2.5], or [] for none)"
                              : std::is_floating_point_v<std::remove_cvref_t<decltype(field)>>
                                  ? "number"
                                  : "integer"));
           ++i;
         }()),
         ...);
      },
      state_fields(state));
  return state;
}

// Restores every hook of `hooks` from `text`: each exactly once, no other line. Nothing is
// restored unless every line parses; then a hook's restore() refusing its state is an error
// naming it. Throws std::invalid_argument with the cause (the caller names the file).
template <class... H>
void decode_hook_states(std::string_view text, H&... hooks) {
  const std::vector<std::string_view> lines = hook_state_lines(text);
  const std::string names[] = {std::string(H::state_name())..., std::string()};
  std::vector<std::vector<std::string_view>> found(sizeof...(H));
  for (const std::string_view line : lines) {
    std::vector<std::string_view> tokens = state_tokens(line);
    std::size_t index = 0;
    while (index < sizeof...(H) && names[index] != tokens[0]) ++index;
    if (index == sizeof...(H))
      bad_hook_states("it holds the state of hook " + quoted_state_name(tokens[0]) +
                      ", which this session does not have (a session must have the hooks whose "
                      "states it resumes)");
    if (!found[index].empty())
      bad_hook_states("it holds the state of hook " + quoted_state_name(tokens[0]) + " twice");
    found[index] = std::move(tokens);
  }
  for (std::size_t i = 0; i < sizeof...(H); ++i)
    if (found[i].empty())
      bad_hook_states("it holds no state for hook " + quoted_state_name(names[i]) +
                      ", which this session has (it was saved without that hook)");
  [[maybe_unused]] std::size_t i = 0;
  auto states = std::tuple{[&] { return decode_hook_state<H>(found[i++]); }()...};
  std::apply(
      [&](const auto&... state) {
        ((([&] {
           try {
             hooks.restore(state);
           } catch (const std::exception& e) {
             bad_hook_states("hook " + quoted_state_name(H::state_name()) +
                             " refused its state: " + e.what());
           }
         }())),
         ...);
      },
      states);
}

template <class... H>
std::string encode_hook_states(const H&... hooks) {
  std::string out(hook_state_header);
  out += '\n';
  (encode_hook_state(out, hooks), ...);
  out += "end\n";
  return out;
}

// Checks the names of a session's stateful hooks once, at its creation: each spelled as the file
// can hold it, no two alike.
template <class... H>
void check_hook_state_names() {
  const std::string names[] = {std::string(H::state_name())...};
  for (std::size_t i = 0; i < sizeof...(H); ++i) {
    if (!valid_state_name(names[i]))
      throw std::invalid_argument("runhooks: hook state name " + quoted_state_name(names[i]) +
                                  " must be 1-200 printable characters without spaces.");
    for (std::size_t j = 0; j < i; ++j)
      if (names[i] == names[j])
        throw std::invalid_argument("runhooks: two hooks of the session save their state as " +
                                    quoted_state_name(names[i]) +
                                    "; a checkpoint could not tell them apart (give them "
                                    "different keys, or keep one).");
  }
}

}  // namespace detail

}  // namespace runhooks
