// docs/flags.md from the flag table: one table per --help heading.
#include <map>
#include <sstream>

#include "tools/dp/flags/flag_table.hpp"

namespace dp::cli {

namespace {

constexpr Command kCommands[] = {Command::Train, Command::Memprof, Command::Plan, Command::Demo, Command::Eval};

std::string number_text(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// A value as a user types it: 0.05, 0.9,0.999, auto; "" for an empty text or list.
std::string value_text(const FlagMember& member, const Flags& values) {
  return std::visit(
      [&](auto m) -> std::string {
        const auto& v = values.*m;
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "on" : "off";
        } else if constexpr (std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<float>>) {
          std::string text;
          for (const auto x : v) text += (text.empty() ? "" : ",") + number_text(x);
          return text;
        } else if constexpr (std::is_floating_point_v<T>) {
          return number_text(v);
        } else {
          return std::to_string(v);
        }
      },
      member);
}

std::string kind_text(const FlagRow& row) {
  switch (kind_of(row)) {
    case FlagKind::Switch: return "switch";
    case FlagKind::Text: return row.check == FlagCheck::Path ? "path" : "text";
    case FlagKind::Numbers: return row.values == 2 ? "number,number" : "numbers, comma-separated";
    case FlagKind::Number: return "number";
    case FlagKind::WholeNumber: break;
  }
  return "whole number";
}

// The default each command starts from; where commands differ, the others after the first's.
std::string default_text(const FlagRow& row) {
  if (!row.shows_default) return "";
  std::string first;
  std::string others;
  for (const Command c : kCommands) {
    if (!takes(row, c)) continue;
    const std::string v = value_text(row.member, defaults_for(c));
    if (first.empty()) first = v;
    else if (v != first) others += std::string(others.empty() ? "" : "; ") + command_name(c) + ": `" + v + "`";
  }
  return "`" + first + "`" + (others.empty() ? "" : " (" + others + ")");
}

std::string commands_text(const FlagRow& row) {
  std::string text;
  for (const Command c : kCommands)
    if (takes(row, c) && (row.hidden_in & static_cast<unsigned>(c)) == 0)
      text += (text.empty() ? "" : ", ") + std::string(command_name(c));
  return text;
}

std::string names_text(std::string_view names) {
  std::string text;
  while (!names.empty()) {
    const size_t comma = names.find(',');
    text += (text.empty() ? "`" : ", `") + std::string(names.substr(0, comma)) + "`";
    names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
  }
  return text;
}

std::string cell(std::string_view text) {
  std::string out;
  for (const char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

std::string flags_markdown() {
  std::ostringstream md;
  md << "# Flags\n\n"
     << "Every flag of `dp train`, `dp memprof`, `dp plan`, `dp demo` and `dp eval`, under the headings `--help`\n"
     << "lists them with. Made from the flag table (`tools/dp/flags/flag_table.cpp`) by\n"
     << "`build/flags_doc --write docs/flags.md`; the test `flags_doc` fails when the two differ. A flag given\n"
     << "twice takes its last value. The guides say more: [train.md](train.md), [plan.md](plan.md),\n"
     << "[memprof.md](memprof.md).\n";
  std::vector<std::string_view> groups = flag_groups();
  groups.push_back("");
  for (const std::string_view group : groups) {
    md << "\n## " << (group.empty() ? std::string_view("Each command's own") : group) << "\n\n"
       << "| Flag | Value | Default | Commands | What it does |\n"
       << "|---|---|---|---|---|\n";
    for (const FlagRow& row : flag_table())
      if (row.group == group && !commands_text(row).empty())
        md << "| " << names_text(row.names) << " | " << kind_text(row) << " | " << cell(default_text(row)) << " | "
           << commands_text(row) << " | " << cell(row.help) << (row.required ? " (required)" : "") << " |\n";
  }
  return md.str();
}

}  // namespace dp::cli
