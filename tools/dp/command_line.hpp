// The dp command line as a function: the commands registered on an app, and argv parsed into the
// command to run, or into the exit code and the words the parse ends with (help, the version, an
// unknown command or flag, a flag without its value), in dp's wording. main() prints and runs what
// comes back; the command-line fuzz target (tests/fuzz/fuzz_command_line.cpp) parses and runs
// nothing.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "tools/dp/commands.hpp"

namespace dp::cli {

// The app with every command on it, and what each runs.
struct DpCommandLine {
  std::unique_ptr<CLI::App> app;
  Run train, devices, demo, memprof, plan, eval;
};
// `version`: what --version prints.
DpCommandLine make_command_line(const std::string& version);

struct ParsedCommandLine {
  Run run;               // the command to run; empty when the parse ends the program
  int exit_code = 0;     // then: 0 (help, the version), 2 (a usage error)
  std::string out, err;  // then: what goes to stdout and to stderr
};
ParsedCommandLine parse_command_line(DpCommandLine& cli, int argc, const char* const* argv);

}  // namespace dp::cli
