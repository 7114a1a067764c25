// Small compile-time searches over type packs, shared by the run-args merge and the session.
#pragma once

#include <cstddef>
#include <exception>
#include <type_traits>

namespace runhooks::detail {

inline constexpr std::size_t npos = static_cast<std::size_t>(-1);

// Index of the first T in Ts..., or npos.
template <class T, class... Ts>
inline constexpr std::size_t index_of = [] {
  constexpr bool same[] = {std::is_same_v<T, Ts>..., false};
  for (std::size_t i = 0; i < sizeof...(Ts); ++i)
    if (same[i]) return i;
  return npos;
}();

template <class T, class... Ts>
inline constexpr bool contains = index_of<T, Ts...> != npos;

// Delays a static_assert(false) until instantiation, naming the types involved.
template <class...>
inline constexpr bool always_false = false;

// A stand-in value on a path whose static_assert has already failed, so that the compiler
// reports the mistake once instead of again where the value is used. Never runs.
template <class T>
[[noreturn]] T after_diagnostic() {
  std::terminate();
}

}  // namespace runhooks::detail
