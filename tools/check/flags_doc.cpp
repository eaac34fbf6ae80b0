// docs/flags.md from the flag table: --write FILE makes it, --check FILE fails (exit 1) when FILE
// differs from what the table says now.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "io/atomic_file.hpp"
#include "tools/dp/flags/flag_table.hpp"

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "--write") != 0 && std::strcmp(argv[1], "--check") != 0)) {
    std::fprintf(stderr, "usage: flags_doc --write FILE | --check FILE\n");
    return 2;
  }
  const std::string made = dp::cli::flags_markdown();
  if (std::strcmp(argv[1], "--write") == 0) {
    dp::write_file_atomically(argv[2], made);
    return 0;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str() != made) {
    std::fprintf(stderr, "%s is not what the flag table says; remake it: build/flags_doc --write %s\n", argv[2], argv[2]);
    return 1;
  }
  return 0;
}
