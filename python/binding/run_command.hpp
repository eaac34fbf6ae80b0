// A dp command run in this process (the Python package's calls): argv as the CLI takes it, parsed
// by the same flag table, run by the same command, its failure described as dp's main() describes
// it. Called without the GIL.
#pragma once
#include <string>
#include <vector>

namespace dp::python {

struct CommandOutcome {
  int exit_code = 0;     // dp's: 0, 1 an error, 2 a usage error, 3 out of memory, 128 + a signal
  std::string message;   // a failure's (the parse's words, or the error's, without "error: ")
  std::string remedies;  // out of memory: the remedies planned for the run
};

// `interruptible`: SIGINT and SIGTERM handled as dp handles them while it runs (dp train finishes
// its step, checkpoints and returns 130 or 143); otherwise the caller's handlers stay (Python's:
// Ctrl-C is seen when the call returns). OpenBLAS runs one thread while the command runs (the
// devices are the parallelism, as in the CLI) and the caller's count after. `step_lines`: dp train
// prints its step lines (off where the caller shows progress its own way).
CommandOutcome run_command(const std::vector<std::string>& argv, bool interruptible, bool step_lines);

}  // namespace dp::python
