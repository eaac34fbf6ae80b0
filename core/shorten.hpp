// A value quoted in an error message, cut to one short line: a file may hold a 100 KB string or
// a tensor name of any length, and a message repeats it to name the problem, not to copy it.
#pragma once
#include <string>
#include <string_view>

namespace dp {

inline std::string shorten(std::string_view text, size_t max = 60) {
  std::string out(text.substr(0, text.size() > max ? max - 3 : max));
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace dp
