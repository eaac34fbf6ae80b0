// The bench tools' command line: their positional numbers, checked, and their main, which turns an
// error into one line on stderr, "tool: what", and exit status 1.
#pragma once
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

namespace dp::bench {

// Positional argument `i` (from 1), named `name` in errors, as a whole number; `fallback` when it is
// not given. "x" or "12abc" is an error naming the argument, not a silent 12 or a bare "stoll".
inline int64_t whole_arg(int argc, char** argv, int i, const char* name, int64_t fallback) {
  if (argc <= i) return fallback;
  const std::string text = argv[i];
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument("argument " + std::to_string(i) + " (" + name + "): '" + text +
                                "' is not a whole number");
  return v;
}

// The same for a real number ("64", "0.5").
inline double real_arg(int argc, char** argv, int i, const char* name, double fallback) {
  if (argc <= i) return fallback;
  const std::string text = argv[i];
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument("argument " + std::to_string(i) + " (" + name + "): '" + text + "' is not a number");
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
