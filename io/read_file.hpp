// A whole file's bytes, for the loaders that parse a file in memory (safetensors, token files,
// text corpora).
#pragma once
#include <string>

namespace dp {

// Read at the file's size in one call (a checkpoint is hundreds of MiB: no growing buffer, no
// second copy); a file whose size is unknown (a pipe) is read to its end. RuntimeError naming the
// path and the system's reason when it cannot be opened or read.
std::string read_file(const std::string& path);

}  // namespace dp
