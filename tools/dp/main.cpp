// dp: the dp-engine command line. Exit codes: 0 ok, 1 runtime error, 2 usage error,
// 3 out of memory.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>
#include <new>
#include <regex>

#include "core/error.hpp"
#include "core/setting_name.hpp"
#include "io/atomic_file.hpp"
#include "runtime/memory.hpp"
#include "engine/comm/process_group.hpp"
#include "dp_version.hpp"
#include "tools/dp/commands.hpp"
#include "tools/dp/remedies.hpp"
#include "tools/dp/suggest.hpp"

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

std::string version_text() {
#ifdef DP_BUILD_CUDA
  const std::string backend = std::string("with CUDA ") + DP_BUILD_CUDA;
#else
  const std::string backend = "without CUDA (host and meta devices only)";
#endif
  return std::string("dp-engine, commit ") + DP_COMMIT + ", built " + backend;
}

std::vector<std::string> names_of(const std::vector<CLI::App*>& commands) {
  std::vector<std::string> names;
  for (const CLI::App* c : commands) names.push_back(c->get_name());
  return names;
}

// Every long flag of a command ("--epochs"), for suggestions.
std::vector<std::string> flags_of(const CLI::App& command) {
  std::vector<std::string> flags;
  for (const CLI::Option* o : command.get_options())
    for (const std::string& name : o->get_lnames()) flags.push_back("--" + name);
  return flags;
}

// CLI11's "The following arguments were not expected: b a" lists them reversed and suggests
// nothing: name the first unknown flag (or stray value) of the command and the closest flag.
std::string extras_message(CLI::App& app) {
  const CLI::App* command = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
  const std::vector<std::string> extras = app.remaining(true);
  const std::string where = "dp " + command->get_name();
  for (const std::string& e : extras)
    if (e.rfind("-", 0) == 0) {
      const std::string flag = e.substr(0, e.find('='));
      return "unknown option '" + flag + "' for " + where + dp::cli::did_you_mean(flag, flags_of(*command)) +
             "; see " + where + " --help";
    }
  return "unexpected argument '" + (extras.empty() ? std::string() : extras.front()) + "' for " + where +
         " (a value without its flag?); see " + where + " --help";
}

// CLI11's wording ("--steps: 1 required INT missing\nRun with --help for more information.") in
// dp's: what is wrong with which flag, and where the help is.
std::string parse_error_message(CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* command = app.get_subcommands().empty() ? &app : app.get_subcommands().front();
  const std::string where = command == &app ? "dp --help" : "dp " + command->get_name() + " --help";
  std::string what = e.what();
  static const std::regex missing(R"(^(\S+): \d+ required (\S+) missing$)");
  std::smatch m;
  if (std::regex_match(what, m, missing)) {
    const std::string kind = m[2] == "INT" ? "a whole number" : m[2] == "FLOAT" ? "a number" : "a value";
    what = m[1].str() + " needs a value (" + kind + ")";
  } else if (what == "A subcommand is required") {
    what = "a command is required";
  }
  return what + "; see " + where;
}

}  // namespace


std::vector<std::string>& dp::cli::command_line() {
  static std::vector<std::string> line;
  return line;
}

int main(int argc, char** argv) {
  configure_openblas(argv);
  dp::install_output_cleanup();  // a signal never leaves a half-written temporary behind
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported as any failed write,
  // instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  dp::cli::command_line().assign(argv, argv + argc);
  // The library's errors name a setting in words ("split"); here they name the flag ("--split").
  dp::name_settings_with([](std::string_view name) { return "--" + std::string(name); });
  CLI::App app{"dp-engine: single-process multi-device DataParallel training", "dp"};
  app.require_subcommand(1);
  auto train = dp::cli::add_train_command(app);
  auto devices = dp::cli::add_devices_command(app);
  auto demo = dp::cli::add_demo_command(app);
  auto memprof = dp::cli::add_memprof_command(app);
  auto plan = dp::cli::add_plan_command(app);
  auto eval = dp::cli::add_eval_command(app);
  app.set_version_flag("--version", version_text(), "print dp's commit and build (CUDA or not), and exit");
  // A first word that is no command: say so, with the closest command (CLI11 says only that one is required).
  const std::vector<std::string> commands = names_of(app.get_subcommands({}));
  // `dp` alone, `dp help` and `dp help COMMAND`: the help, as --help gives it.
  if (argc == 1 || (argc <= 3 && std::string(argv[1]) == "help")) {
    CLI::App* about = &app;
    if (argc == 3) {
      if (std::find(commands.begin(), commands.end(), std::string(argv[2])) == commands.end()) {
        std::fprintf(stderr, "error: unknown command '%s'%s (dp --help)\n", argv[2],
                     dp::cli::did_you_mean(argv[2], commands).c_str());
        return 2;
      }
      about = app.get_subcommand(argv[2]);
    }
    std::printf("%s", about->help().c_str());
    return argc == 1 ? 2 : 0;  // a bare `dp` ran nothing: not a success
  }
  if (argc >= 2 && argv[1][0] != '-' &&
      std::find(commands.begin(), commands.end(), std::string(argv[1])) == commands.end()) {
    std::string known;
    for (const std::string& c : commands) known += (known.empty() ? "" : ", ") + c;
    std::fprintf(stderr, "error: unknown command '%s'%s; the commands: %s (dp --help)\n", argv[1],
                 dp::cli::did_you_mean(argv[1], commands).c_str(), known.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    std::fprintf(stderr, "error: %s\n", extras_message(app).c_str());
    return 2;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // In dp's words, as every other error: "error: ...; see dp train --help".
    std::fprintf(stderr, "error: %s\n", parse_error_message(app, e).c_str());
    return 2;
  }
  // Under mpirun an error on this rank ends the whole job rather than leaving the others waiting.
  auto failed = [](int code) {
    dp::ProcessGroup::end_job_after_error(code);
    return code;
  };
  try {
    if (app.got_subcommand("train")) return train();
    if (app.got_subcommand("devices")) return devices();
    if (app.got_subcommand("demo")) return demo();
    if (app.got_subcommand("memprof")) return memprof();
    if (app.got_subcommand("plan")) return plan();
    if (app.got_subcommand("eval")) return eval();
  } catch (const dp::UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return failed(2);
  } catch (const dp::cli::OutOfMemoryExit& e) {  // with its run's remedies
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n%s", e.what(), e.remedies().c_str());
    return failed(3);
  } catch (const dp::OutOfMemoryError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n%s", e.what(), dp::cli::out_of_memory_remedies().c_str());
    return failed(3);
  } catch (const dp::ReplicaError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n%s", e.what(), e.out_of_memory ? dp::cli::out_of_memory_remedies().c_str() : "");
    return failed(e.out_of_memory ? 3 : 1);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: the host ran out of memory (std::bad_alloc); try a smaller --batch, data set or "
                         "--generated-size\n");
    return failed(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return failed(1);
  }
  return 2;
}
