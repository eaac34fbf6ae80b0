// dp: the dp-engine command line. Exit codes: 0 ok, 1 runtime error, 2 usage error,
// 3 out of memory (tools/dp/command_failure.hpp).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "io/atomic_file.hpp"
#include "runtime/memory.hpp"
#include "engine/comm/process_group.hpp"
#include "tools/dp/command_failure.hpp"
#include "tools/dp/command_line.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/version_text.hpp"

namespace {

// Debian's OpenBLAS 0.3.21 does not recognise newer CPUs (AMD Zen 4, ...) and falls back to
// slow generic kernels; and its own thread pool is one per process, shared by every device's
// thread: two devices calling sgemm at once queue on it. Both settings are read when the library
// loads, before main, so set what is not set already (the core type for this CPU; one BLAS
// thread — parallelism comes from devices and --threads-per-device) and start again once.
// DP_OPENBLAS_REEXEC=0 turns this off; a value the user set is kept.
void configure_openblas(char** argv) {
  if (std::getenv("DP_OPENBLAS_REEXEC")) return;
  bool changed = false;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const char* core =
        __builtin_cpu_supports("avx512f") ? "SkylakeX" : __builtin_cpu_supports("avx2") ? "Haswell" : nullptr;
    if (core) setenv("OPENBLAS_CORETYPE", core, 1), changed = true;
  }
  if (!std::getenv("OPENBLAS_NUM_THREADS")) setenv("OPENBLAS_NUM_THREADS", "1", 1), changed = true;
  if (!changed) return;
  setenv("DP_OPENBLAS_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);  // on failure, carry on with the settings we have
}

}  // namespace

int main(int argc, char** argv) {
  configure_openblas(argv);
  dp::install_output_cleanup();  // a signal never leaves a half-written temporary behind
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported as any failed write,
  // instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  dp::cli::command_line().assign(argv, argv + argc);
  // The library's errors name a setting in words ("split"); here they name the flag ("--split").
  dp::name_settings_with([](std::string_view name) { return "--" + std::string(name); });
  dp::cli::DpCommandLine cli = dp::cli::make_command_line(dp::cli::version_text());
  const dp::cli::ParsedCommandLine parsed = dp::cli::parse_command_line(cli, argc, argv);
  if (!parsed.run) {
    std::fputs(parsed.out.c_str(), stdout);
    std::fputs(parsed.err.c_str(), stderr);
    return parsed.exit_code;
  }
  try {
    return parsed.run();
  } catch (...) {
    const dp::cli::CommandFailure failure = dp::cli::failure_of(std::current_exception());
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n%s", failure.message.c_str(), failure.remedies.c_str());
    // Under mpirun an error on this rank ends the whole job rather than leaving the others waiting.
    dp::ProcessGroup::end_job_after_error(failure.exit_code);
    return failure.exit_code;
  }
}
