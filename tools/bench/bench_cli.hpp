// The bench tools' command line: their positional numbers, checked, and their main, which turns an
// error into one line on stderr, "tool: what", and exit status 1.
#pragma once
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace dp::bench {

// Positional argument `i` (from 1), named `name` in errors, as a T (int64_t, double); `fallback`
// when it is not given. "x" or "12abc" is an error naming the argument, not a silent 12 or a bare
// "stoll".
template <class T>
T number_arg(int argc, char** argv, int i, const char* name, T fallback) {
  if (argc <= i) return fallback;
  const std::string text = argv[i];
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument("argument " + std::to_string(i) + " (" + name + "): '" + text + "' is not a" +
                                (std::is_integral_v<T> ? " whole number" : " number"));
  return v;
}

inline int guarded_main(const char* tool, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace dp::bench
