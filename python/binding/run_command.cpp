#include "run_command.hpp"

#include <cblas.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string_view>

#include "core/setting_name.hpp"
#include "io/atomic_file.hpp"
#include "tools/dp/command_failure.hpp"
#include "tools/dp/command_line.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/progress.hpp"
#include "tools/dp/version_text.hpp"

namespace dp::python {
namespace {

// OpenBLAS's thread count for the scope, the caller's (PyTorch's, NumPy's) back after.
class BlasThreads {
 public:
  explicit BlasThreads(int n) : before_(openblas_get_num_threads()) { openblas_set_num_threads(n); }
  ~BlasThreads() { openblas_set_num_threads(before_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int before_;
};

}  // namespace

CommandOutcome run_command(const std::vector<std::string>& argv, bool interruptible, bool step_lines) {
  std::optional<OutputCleanupScope> signals;
  if (interruptible) signals.emplace();
  BlasThreads one(1);
  cli::show_step_progress(step_lines);
  cli::command_line() = argv;  // a checkpoint records it; an interrupted run says how to resume
  // Errors name the flags, as the CLI's do (the Python keywords are their names in snake_case).
  name_settings_with([](std::string_view name) { return "--" + std::string(name); });
  CommandOutcome outcome;
  try {
    cli::DpCommandLine cli = cli::make_command_line(cli::version_text());
    std::vector<const char*> args;
    for (const std::string& a : argv) args.push_back(a.c_str());
    const cli::ParsedCommandLine parsed = cli::parse_command_line(cli, static_cast<int>(args.size()), args.data());
    if (!parsed.run) {
      outcome.exit_code = parsed.exit_code;
      outcome.message = parsed.err.empty() ? parsed.out : parsed.err;
    } else {
      outcome.exit_code = parsed.run();
    }
  } catch (...) {
    const cli::CommandFailure failure = cli::failure_of(std::current_exception());
    outcome = {failure.exit_code, failure.message, failure.remedies};
  }
  cli::show_step_progress(true);
  std::fflush(stdout);
  std::fflush(stderr);
  return outcome;
}

}  // namespace dp::python
