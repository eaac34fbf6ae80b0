// Outputs that never destroy an input: checked once, before a run reads or writes anything.
//
// An output is compared with every input by the file it lands on (a symlink followed to its end:
// write_file_atomically replaces the link's target), by device and inode where the file exists,
// else by its resolved path. Input folders (a data set's, a checkpoint's) are walked as their
// readers walk them, links followed, so a link inside an image folder protects the file it points to.
#pragma once
#include <string>
#include <vector>

namespace dp {

// Outputs and inputs of one run, by flag.
struct NamedPath {
  std::string what;  // "--save", "--data file train-images-idx3-ubyte.gz", ...
  std::string path;
};

// Two outputs, or an output and an input, that are the same file: a UsageError naming both flags
// (the run would overwrite what it reads, or one output the other).
void check_distinct_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Input folders: an output that would replace an existing file read through the folder is a
// UsageError naming both flags and the file: one named inside the folder (the output path itself,
// or where its links lead), or any file the folder reaches through its links or hard links.
// (A new file in the folder is allowed: it destroys nothing.)
void check_outside_folders(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& folders);

}  // namespace dp
