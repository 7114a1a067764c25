// The one doctest runner, linked into every unit test executable; test cases live in the topic files.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
