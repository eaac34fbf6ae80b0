// The fuzz targets without libFuzzer: `dp_fuzz_replay TARGET PATH...` runs TARGET's one-input
// function on each file (each file of a folder, in name order), as the fuzzer runs an input, so
// the ordinary suite replays every target's seed corpus and every finding kept in
// tests/fuzz/regressions/ (a finding aborts, naming the file). Each target's source is compiled here
// with its LLVMFuzzerTestOneInput renamed dp_fuzz_<target> (tests/fuzz/CMakeLists.txt).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_targets.inc"  // DP_FUZZ_TARGETS(X): X(format) for each fuzz_<format>.cpp

#define DP_DECLARE(name) extern "C" int dp_fuzz_##name(const uint8_t* data, size_t size);
DP_FUZZ_TARGETS(DP_DECLARE)
#undef DP_DECLARE

namespace {

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};
#define DP_ENTRY(name) {#name, dp_fuzz_##name},
const Target kTargets[] = {DP_FUZZ_TARGETS(DP_ENTRY)};
#undef DP_ENTRY

int run_file(const Target& t, const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "dp_fuzz_replay: cannot read %s\n", p.c_str());
    return 1;
  }
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "%s: %s (%zu bytes)\n", t.name, p.c_str(), bytes.size());
  t.run(bytes.data(), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Target* target = nullptr;
  for (const Target& t : kTargets)
    if (argc > 1 && std::string(argv[1]) == t.name) target = &t;
  if (!target) {
    std::fprintf(stderr, "usage: dp_fuzz_replay TARGET PATH... (targets:");
    for (const Target& t : kTargets) std::fprintf(stderr, " %s", t.name);
    std::fprintf(stderr, ")\n");
    return 2;
  }
  int inputs = 0;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path p = argv[i];
    if (!std::filesystem::is_directory(p)) {
      if (run_file(*target, p)) return 1;
      ++inputs;
      continue;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(p))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (run_file(*target, f)) return 1;
      ++inputs;
    }
  }
  if (inputs == 0) {  // a replay of nothing would pass having checked nothing
    std::fprintf(stderr, "%s: no inputs in the paths given\n", target->name);
    return 1;
  }
  std::fprintf(stderr, "%s: %d inputs, no finding\n", target->name, inputs);
  return 0;
}
