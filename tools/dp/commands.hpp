// Subcommands of the dp CLI. Each registers its flags on the app and returns the function
// that runs it (after parsing).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace dp::cli {

using Run = std::function<int()>;
Run add_train_command(CLI::App& app);
Run add_devices_command(CLI::App& app);
Run add_demo_command(CLI::App& app);
Run add_memprof_command(CLI::App& app);
Run add_plan_command(CLI::App& app);
Run add_eval_command(CLI::App& app);

// The command line as given (main sets it): checkpoints record it, and an interrupted run says
// how to resume.
std::vector<std::string>& command_line();

}  // namespace dp::cli
