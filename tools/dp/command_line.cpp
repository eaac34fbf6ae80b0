#include "tools/dp/command_line.hpp"

#include <algorithm>
#include <regex>
#include <sstream>
#include <vector>

#include "tools/dp/suggest.hpp"

namespace dp::cli {

namespace {

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
      return "unknown option '" + flag + "' for " + where + did_you_mean(flag, flags_of(*command)) +
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

ParsedCommandLine ends(int code, std::string out, std::string err) {
  ParsedCommandLine p;
  p.exit_code = code, p.out = std::move(out), p.err = std::move(err);
  return p;
}

}  // namespace

std::vector<std::string>& command_line() {
  static std::vector<std::string> line;
  return line;
}

DpCommandLine make_command_line(const std::string& version) {
  DpCommandLine cli;
  cli.app = std::make_unique<CLI::App>("dp-engine: single-process multi-device DataParallel training", "dp");
  CLI::App& app = *cli.app;
  app.require_subcommand(1);
  cli.train = add_train_command(app);
  cli.devices = add_devices_command(app);
  cli.demo = add_demo_command(app);
  cli.memprof = add_memprof_command(app);
  cli.plan = add_plan_command(app);
  cli.eval = add_eval_command(app);
  app.set_version_flag("--version", version, "print dp's commit and build (CUDA or not), and exit");
  return cli;
}

ParsedCommandLine parse_command_line(DpCommandLine& cli, int argc, const char* const* argv) {
  CLI::App& app = *cli.app;
  // A first word that is no command: say so, with the closest command (CLI11 says only that one is required).
  const std::vector<std::string> commands = names_of(app.get_subcommands({}));
  // `dp` alone, `dp help` and `dp help COMMAND`: the help, as --help gives it.
  if (argc == 1 || (argc <= 3 && std::string(argv[1]) == "help")) {
    CLI::App* about = &app;
    if (argc == 3) {
      if (std::find(commands.begin(), commands.end(), std::string(argv[2])) == commands.end())
        return ends(2, "", "error: unknown command '" + std::string(argv[2]) + "'" + did_you_mean(argv[2], commands) +
                               " (dp --help)\n");
      about = app.get_subcommand(argv[2]);
    }
    return ends(argc == 1 ? 2 : 0, about->help(), "");  // a bare `dp` ran nothing: not a success
  }
  if (argc >= 2 && argv[1][0] != '-' &&
      std::find(commands.begin(), commands.end(), std::string(argv[1])) == commands.end()) {
    std::string known;
    for (const std::string& c : commands) known += (known.empty() ? "" : ", ") + c;
    return ends(2, "", "error: unknown command '" + std::string(argv[1]) + "'" + did_you_mean(argv[1], commands) +
                           "; the commands: " + known + " (dp --help)\n");
  }
  std::ostringstream out, err;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    return ends(2, "", "error: " + extras_message(app) + "\n");
  } catch (const CLI::Success& e) {  // --help, --help-all, --version: CLI11 writes them
    const int code = app.exit(e, out, err);
    return ends(code, out.str(), err.str());
  } catch (const CLI::ParseError& e) {
    // In dp's words, as every other error: "error: ...; see dp train --help".
    return ends(2, "", "error: " + parse_error_message(app, e) + "\n");
  }
  ParsedCommandLine p;
  for (const auto& [name, run] : {std::pair<const char*, const Run*>{"train", &cli.train}, {"devices", &cli.devices},
                                  {"demo", &cli.demo}, {"memprof", &cli.memprof}, {"plan", &cli.plan},
                                  {"eval", &cli.eval}})
    if (app.got_subcommand(name)) p.run = *run;
  if (!p.run) return ends(2, "", "");  // (require_subcommand(1) leaves none unnamed)
  return p;
}

}  // namespace dp::cli
