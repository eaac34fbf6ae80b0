// The emulated kernels' tests (tests/emulated/*.cpp): doctest's main.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
