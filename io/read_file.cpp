#include "io/read_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace dp {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);  // not ios::ate: a pipe cannot seek, and ate would close it
  if (!in) throw RuntimeError("cannot open " + path + ": " + std::strerror(errno));
  // A directory opens as a stream here, and its "size" is nonsense.
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    throw RuntimeError("cannot read " + path + ": it is a directory, not a file");
  const std::streamoff size = in.seekg(0, std::ios::end) ? static_cast<std::streamoff>(in.tellg()) : -1;
  std::string bytes;
  if (size > 0) {
    bytes.resize(static_cast<size_t>(size));
    if (!in.seekg(0) || !in.read(bytes.data(), size))
      throw RuntimeError(path + ": read failed after " + std::to_string(in.gcount()) + " of " + std::to_string(size) +
                         " bytes: " + std::strerror(errno));
    return bytes;
  }
  // No size (a pipe: the seek failed, nothing read) or a size of 0 (an empty file, /proc): read
  // what comes, from the start.
  in.clear();
  if (size == 0) in.seekg(0);
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) throw RuntimeError(path + ": read failed: " + std::strerror(errno));
  return bytes;
}

}  // namespace dp
