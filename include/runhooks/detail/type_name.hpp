// The name of a type as the compiler spells it, at compile time, for diagnostics and profiles.
#pragma once

#include <string_view>

namespace runhooks::detail {

template <class T>
constexpr std::string_view type_name() noexcept {
#if defined(__clang__) || defined(__GNUC__)
  // "... type_name() [with T = Name; ...]" (GCC) or "... type_name() [T = Name]" (Clang).
  constexpr std::string_view pretty = __PRETTY_FUNCTION__;
  constexpr std::size_t start = pretty.find("T = ") + 4;
  constexpr std::size_t end = pretty.find_first_of(";]", start);
  return pretty.substr(start, end - start);
#else
  return "hook";
#endif
}

}  // namespace runhooks::detail
