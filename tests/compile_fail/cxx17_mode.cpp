// expect: runhooks needs C++20: compile with -std=c++20
// first-error: runhooks needs C++20: compile with -std=c++20
// flags: -std=c++17
// A compiler in C++17 mode stops at <runhooks/detail/config.hpp>, the first include of every
// public header, with the flag to use, before any C++20 construct can fail obscurely.
#include <runhooks/detail/config.hpp>

int main() {}
