#include "engine/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/error.hpp"

namespace dp {

namespace {
std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}
std::string directory_of(const std::string& path) {
  auto dir = std::filesystem::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}
}  // namespace

void write_file_atomically(const std::string& path, std::string_view contents) {
  const std::string tmp = temp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError("cannot write " + path + ": " + std::strerror(errno));
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw RuntimeError("cannot write " + path + ": " + std::strerror(err));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw RuntimeError("cannot write " + path + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw RuntimeError("cannot write " + path + ": " + std::strerror(err));
  }
  // Make the rename itself durable.
  int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void check_writable(const std::string& path, const std::string& what) {
  if (path.empty()) throw UsageError(what + ": empty path");
  if (std::filesystem::is_directory(path)) throw UsageError(what + " " + path + ": is a directory");
  const std::string probe = temp_name(path) + ".probe";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw UsageError(what + " " + path + ": cannot write there (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
  if (std::filesystem::exists(path) && ::access(path.c_str(), W_OK) != 0)
    throw UsageError(what + " " + path + ": the existing file is not writable");
}

}  // namespace dp
