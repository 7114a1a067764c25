// expect: runhooks needs C++20: compile with -std=c++20
// first-error: runhooks needs C++20: compile with -std=c++20
// flags: -std=c++17
// max-lines: 12
// A compiler in C++17 mode stops at <runhooks/detail/config.hpp>, the first include of every
// public header, with the flag to use, before any C++20 construct can fail obscurely; and it
// stops there: the message is the whole output (about 9 lines with GCC 12 and Clang 14), not
// the first of the ~3,900 lines GCC printed when it went on through the umbrella header.
#include <runhooks/runhooks.hpp>

int main() {}
