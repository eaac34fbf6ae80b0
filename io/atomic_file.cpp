#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>

#include "core/error.hpp"

namespace fs = std::filesystem;

namespace dp {

namespace {

// The temporary being written, for the signal handler (which may only unlink a fixed buffer).
char g_temp_path[4096];
std::atomic<bool> g_temp_live{false};

struct TempGuard {  // registers a temporary for the handler; unlinks it unless kept
  std::string path;
  bool keep = false;
  explicit TempGuard(std::string p) : path(std::move(p)) {
    if (path.size() < sizeof g_temp_path) {
      std::memcpy(g_temp_path, path.c_str(), path.size() + 1);
      g_temp_live.store(true);
    }
  }
  ~TempGuard() {
    g_temp_live.store(false);
    if (!keep) ::unlink(path.c_str());
  }
};

std::atomic<bool> g_defer{false};
std::atomic<int> g_pending{0};
std::atomic<int64_t> g_first_ns{0};  // when the first deferred signal came
// What a second press says before the process ends (set_second_interrupt_note), double-buffered
// so the handler never reads a line being written.
char g_notes[2][1024];
size_t g_note_lengths[2];
std::atomic<int> g_note{-1};

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void on_signal(int sig) {
  if (g_defer.load() && (sig == SIGINT || sig == SIGTERM)) {
    if (g_pending.load() == 0) {
      g_first_ns.store(monotonic_ns());
      g_pending.store(sig);  // the first one: the run stops after its step
      return;
    }
    // One press can arrive twice a few microseconds apart (timeout -s INT and job schedulers signal
    // the process and its group): within the window it is the same press.
    if (monotonic_ns() - g_first_ns.load() < kSamePressNs) return;
    if (const int n = g_note.load(); n >= 0) {
      const ssize_t ignored = ::write(STDERR_FILENO, g_notes[n], g_note_lengths[n]);
      (void)ignored;
    }
  }
  if (g_temp_live.load()) ::unlink(g_temp_path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string temp_name(const std::string& path) { return path + ".tmp." + std::to_string(::getpid()); }

std::string directory_of(const std::string& path) {
  auto dir = fs::path(path).parent_path();
  return dir.empty() ? "." : dir.string();
}

const char* kind_of(const fs::file_status& st) {
  switch (st.type()) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a named pipe";
    case fs::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

}  // namespace

std::string resolve_output(const std::string& path, const std::string& what) {
  std::string target = path;
  // Follow the chain of links by hand: a dangling link's target is where the file will be made.
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target)); ++hops) {
    if (hops > 40) throw UsageError(what + " " + path + ": too many levels of symbolic links");
    const fs::path link = fs::read_symlink(target);
    target = (link.is_absolute() ? link : fs::path(target).parent_path() / link).string();
  }
  const fs::file_status st = fs::status(target);
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw UsageError(what + " " + path + ": is " + kind_of(st) + "; name a regular file");
  return target;
}

void write_file_atomically(const std::string& requested, std::string_view contents) {
  std::string path;
  try {
    path = resolve_output(requested, "output");
  } catch (const UsageError& e) {
    throw RuntimeError(std::string("cannot write ") + e.what());
  }
  // An existing file keeps its permission bits; a new one gets 0666 less the umask, as any
  // program's new file does.
  struct stat old {};
  const bool existed = ::stat(path.c_str(), &old) == 0;
  TempGuard temp(temp_name(path));
  int fd = ::open(temp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) throw RuntimeError("cannot write " + requested + ": " + std::strerror(errno));
  auto fail = [&](int err) {
    ::close(fd);
    return RuntimeError("cannot write " + requested + ": " + std::strerror(err));
  };
  if (existed && ::fchmod(fd, old.st_mode & 07777) != 0) throw fail(errno);
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw fail(w < 0 ? errno : EIO);
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) throw fail(errno);
  if (::close(fd) != 0) throw RuntimeError("cannot write " + requested + ": " + std::strerror(errno));
  if (::rename(temp.path.c_str(), path.c_str()) != 0)
    throw RuntimeError("cannot write " + requested + ": " + std::strerror(errno));
  temp.keep = true;  // it is the file now
  // Make the rename itself durable.
  int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void check_writable(const std::string& path, const std::string& what) {
  if (path.empty()) throw UsageError(what + ": empty path");
  const std::string target = resolve_output(path, what);  // refuses directories and special files
  {
    TempGuard probe(temp_name(target) + ".probe");
    int fd = ::open(probe.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw UsageError(what + " " + path + ": cannot write there (" + std::strerror(errno) + ")");
    ::close(fd);
  }
  if (fs::exists(target) && ::access(target.c_str(), W_OK) != 0)
    throw UsageError(what + " " + path + ": the existing file is not writable");
}

void defer_interrupts() { g_defer.store(true); }

void set_second_interrupt_note(const std::string& line) {
  const int next = g_note.load() == 0 ? 1 : 0;
  const std::string text = line.substr(0, sizeof g_notes[0] - 2) + "\n";
  std::memcpy(g_notes[next], text.data(), text.size());
  g_note_lengths[next] = text.size();
  g_note.store(next);
}
int pending_interrupt() { return g_pending.load(); }

constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};

void install_output_cleanup() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kCleanupSignals) ::sigaction(sig, &sa, nullptr);
}

struct OutputCleanupScope::Saved {
  struct sigaction handlers[std::size(kCleanupSignals)];
};

OutputCleanupScope::OutputCleanupScope() : saved_(std::make_unique<Saved>()) {
  for (size_t i = 0; i < std::size(kCleanupSignals); ++i) ::sigaction(kCleanupSignals[i], nullptr, &saved_->handlers[i]);
  install_output_cleanup();
}

OutputCleanupScope::~OutputCleanupScope() {
  for (size_t i = 0; i < std::size(kCleanupSignals); ++i) ::sigaction(kCleanupSignals[i], &saved_->handlers[i], nullptr);
  g_defer.store(false);
  g_pending.store(0);
  g_note.store(-1);
}

}  // namespace dp
