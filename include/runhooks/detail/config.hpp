// The first include of every public header: stops a compiler not in C++20 mode with one line.
// "Not C++20" means C++17 or older: GCC 10 under -std=c++20 reports 201709L, not 202002L.
#pragma once

#if (defined(_MSVC_LANG) ? _MSVC_LANG : __cplusplus) <= 201703L
#error "runhooks needs C++20: compile with -std=c++20 (MSVC: /std:c++20; CMake: target_compile_features(... cxx_std_20); Meson: cpp_std=c++20)"
// #error lets GCC, Clang and MSVC go on and report every later C++20 construct (thousands of
// lines with GCC); a missing header is fatal in all three, so the line above stays the message.
#include <runhooks_requires_cplusplus20_see_the_error_above>
#endif
