// The command line (tools/dp/command_line.hpp): the input's lines are the arguments after "dp",
// parsed through every command's flags as dp parses them before anything runs; no command runs.
// The property beyond "no crash, no leak, no undefined behaviour": the parse ends in a command to
// run, or in an exit code with something said (help, the version, an error in dp's words) — a
// usage error that says nothing is a finding.
#include <cstdint>
#include <string>
#include <vector>

#include "tools/dp/command_line.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kMostArguments = 64;
  std::vector<std::string> args{"dp"};
  std::string arg;
  for (size_t i = 0; i < size && args.size() <= kMostArguments; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\n') {
      args.push_back(arg), arg.clear();
    } else if (c != '\0') {  // (a C string ends at one)
      arg += c;
    }
  }
  if (size > 0 && args.size() <= kMostArguments) args.push_back(arg);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  dp::cli::DpCommandLine cli = dp::cli::make_command_line("dp-engine (fuzzed)");
  const dp::cli::ParsedCommandLine parsed = dp::cli::parse_command_line(cli, static_cast<int>(argv.size()), argv.data());
  if (!parsed.run && parsed.exit_code != 0 && parsed.out.empty() && parsed.err.empty()) __builtin_trap();
  return 0;
}
