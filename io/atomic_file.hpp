// Output files that never destroy what the user has.
//
// Written atomically: a temporary file beside the target, flushed to disk, renamed over it, so a
// reader (or a crash) never sees half of one. A symlink is followed and its target replaced (the
// link stays a link); an existing file keeps its permissions; a path that is not a regular file
// (a device such as /dev/null, a named pipe, a directory) is refused. A temporary is removed on
// every exit path, SIGINT and SIGTERM included (install_output_cleanup).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace dp {

void write_file_atomically(const std::string& path, std::string_view contents);  // RuntimeError on failure

// Where writing `path` lands: the symlink's target (followed to the end), else the path itself.
// UsageError, naming `what`, when that exists and is not a regular file.
std::string resolve_output(const std::string& path, const std::string& what);

// Can a file be written at path? Checked before a long run: an empty path, a directory, a special
// file, an unwritable place or file are UsageErrors naming `what`. Leaves the file untouched.
void check_writable(const std::string& path, const std::string& what);

// Remove any temporary being written when SIGINT, SIGTERM or SIGHUP arrives, then die of the
// signal as before. Called once by the CLI at start.
void install_output_cleanup();

// From now on the first SIGINT or SIGTERM is only recorded (the caller finishes its step, saves,
// and exits); a second one ends the process at once (temporaries still removed), printing the
// line set_second_interrupt_note gave. Signals within kSamePressNs of the first are the same press.
void defer_interrupts();
constexpr int64_t kSamePressNs = 300'000'000;
// The one line a second press prints before the process ends: what was saved.
void set_second_interrupt_note(const std::string& line);
int pending_interrupt();  // 0, or the signal that arrived

// For a program that runs commands in its own process (the Python package): the CLI's handling of
// SIGINT, SIGTERM and SIGHUP (install_output_cleanup; a command may defer them) while the scope
// lives; then the program's own handlers back, and nothing deferred or pending.
class OutputCleanupScope {
 public:
  OutputCleanupScope();
  ~OutputCleanupScope();
  OutputCleanupScope(const OutputCleanupScope&) = delete;
  OutputCleanupScope& operator=(const OutputCleanupScope&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace dp
