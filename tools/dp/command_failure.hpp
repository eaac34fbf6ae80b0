// What a command's failure means to its caller: the exit code dp gives it (1 an error, 2 a usage
// error, 3 out of memory), the message, and for an out-of-memory the remedies planned for the run.
// dp's main() prints it; the Python package raises it (dp_engine.DpError, OutOfMemoryError).
#pragma once
#include <exception>
#include <string>

namespace dp::cli {

struct CommandFailure {
  int exit_code = 1;
  std::string message;   // one line, without "error: "
  std::string remedies;  // out of memory: the remedies, each line ending in '\n'; else empty
};

// The failure an exception escaping a command is (rethrows nothing).
CommandFailure failure_of(std::exception_ptr error);

}  // namespace dp::cli
