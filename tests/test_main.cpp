#define DOCTEST_CONFIG_IMPLEMENT
#include "tests/doctest_main.hpp"

int main(int argc, char** argv) { return dp::test::run_doctest(argc, argv); }
