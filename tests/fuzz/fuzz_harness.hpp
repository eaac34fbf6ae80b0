// What every fuzz target shares (docs/testing.md, "Fuzzing"). dp's readers take paths, as the CLI
// hands them files, so the input is written to a file in a per-process folder and the reader runs
// on it in process. The property beyond "no crash, no leak, no undefined behaviour": a file either
// loads or is refused with dp's own error (UsageError or RuntimeError, what the CLI prints and
// exits 2 or 1 with) whose message names the file. A library's raw exception escaping
// (nlohmann's, std::bad_alloc, std::length_error, ...) or a message that does not name the file is
// a finding: the target aborts with it, and libFuzzer keeps the input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <typeinfo>
#include <vector>
#include <unistd.h>

#include "core/error.hpp"

namespace dp::fuzz {

// A folder of this process's own (libFuzzer's -jobs run several), under /dev/shm where it exists.
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("dp-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// The input as the file `name` in the scratch folder (replaced at each input); its path.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const std::filesystem::path p = scratch() / name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", p.c_str());
    std::abort();
  }
  return p.string();
}

// An input that stands for several files: its parts, split at kPartSeparator (in the targets'
// dictionaries, so libFuzzer can move and copy it), at most `parts` of them (the last keeps the rest).
inline const std::string kPartSeparator = "\n--dp-fuzz-next-file--\n";
inline std::vector<std::string> split_parts(const uint8_t* data, size_t size, size_t parts) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> out;
  size_t at = 0;
  while (out.size() + 1 < parts) {
    const size_t next = all.find(kPartSeparator, at);
    if (next == std::string::npos) break;
    out.push_back(all.substr(at, next - at));
    at = next + kPartSeparator.size();
  }
  out.push_back(all.substr(at));
  out.resize(parts);
  return out;
}

inline std::string write_part(const std::string& bytes, const std::string& name) {
  return write_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
}

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

// Runs `read` (which loads whatever the files in `named` hold); a refusal must be dp's own error,
// naming `named` (a file or folder name the message must contain).
template <class Read>
void load_or_refuse(const std::string& named, Read&& read) {
  try {
    read();
  } catch (const UsageError& e) {
    if (std::string(e.what()).find(named) == std::string::npos)
      finding(std::string("a refusal that does not name ") + named + ": " + e.what());
  } catch (const RuntimeError& e) {
    if (std::string(e.what()).find(named) == std::string::npos)
      finding(std::string("a refusal that does not name ") + named + ": " + e.what());
  } catch (const std::exception& e) {
    finding(std::string("an exception that is not dp's (") + typeid(e).name() + "): " + e.what());
  }
}

}  // namespace dp::fuzz
