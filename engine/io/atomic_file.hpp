// Files written so that a reader (or a crash) never sees half of one: write a temporary file
// beside the target, flush it to disk, then rename it over the target.
#pragma once
#include <string>
#include <string_view>

namespace dp {

void write_file_atomically(const std::string& path, std::string_view contents);  // RuntimeError on failure
// Can a file be created at path? Checked before a long run; creates and removes a probe file
// beside it and leaves an existing file at path untouched.
void check_writable(const std::string& path, const std::string& what);

}  // namespace dp
