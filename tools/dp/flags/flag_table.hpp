// The flag table: every flag of every command in one place — its names, the Flags member it sets,
// its heading in --help, the commands that take it, whether --help shows its default, the check its
// text must pass, and its help. --help, did-you-mean (which reads the registered flags) and
// docs/flags.md all come from it; a Python binding's keyword names are its names in snake_case.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tools/dp/flags/flags.hpp"

namespace dp::cli {

// The Flags member a flag sets; its type is the flag's (bool: a switch without a value).
using FlagMember = std::variant<std::string Flags::*, bool Flags::*, int Flags::*, int64_t Flags::*,
                                uint64_t Flags::*, float Flags::*, double Flags::*, std::vector<double> Flags::*,
                                std::vector<float> Flags::*>;

// What a flag's text must be beyond its type.
enum class FlagCheck {
  None,
  Path,    // names a file or folder: not empty
  Uint64,  // a whole number 0..2^64-1 taken as written (CLI11 would clamp)
};

struct FlagRow {
  std::string_view names;  // "--batch", or with an alias: "--weights,--init"
  FlagMember member;
  std::string_view group;  // --help's heading; "": the command's own ("dp plan")
  unsigned commands;       // the Command bits that take it (one name may have a row per command)
  bool shows_default = false;
  FlagCheck check = FlagCheck::None;
  int values = 0;               // a list's exact count (0: any)
  bool required = false;
  std::string_view needs;       // another flag that must be given with it ("--prompt" needs "--sample")
  unsigned hidden_in = 0;       // commands that parse it (to refuse it with a reason) but do not list it
  std::string_view help;
};

const std::vector<FlagRow>& flag_table();
// The --help headings in the order they are listed.
const std::vector<std::string_view>& flag_groups();

inline bool takes(const FlagRow& row, Command c) { return (row.commands & static_cast<unsigned>(c)) != 0; }

// Registers every flag `c` takes on `cmd`, bound to `values` (set to defaults_for(c) first), under
// its heading; a flag given twice takes its last value.
void add_flags(CLI::App* cmd, Command c, Flags& values);

// Every flag `c` takes with its value, by keyword (keyword_of): numbers, switches, text and lists
// as JSON (a checkpoint's "settings").
nlohmann::json settings_json(const Flags& values, Command c);
// The values a settings record holds, over defaults_for(c); keys it does not know are left alone
// (another version's flags). RuntimeError naming a key whose value has the wrong type.
Flags read_settings(const nlohmann::json& settings, Command c);

// docs/flags.md: every heading's flags, with their type, commands, defaults and help.
std::string flags_markdown();

// The flag's long name for a Python keyword: "--loss-scale" -> "loss_scale".
std::string keyword_of(std::string_view names);

// What a flag's value is, by its member's type: docs/flags.md says it, the Python package checks it.
enum class FlagKind { Switch, WholeNumber, Number, Text, Numbers };
FlagKind kind_of(const FlagRow& row);

}  // namespace dp::cli
