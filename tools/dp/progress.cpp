#include "tools/dp/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>

namespace dp::cli {

namespace {
std::string clock_str(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "--:--";
  char buf[32];
  const long s = static_cast<long>(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}
// Columns of the terminal on stderr (80 when it cannot say).
int terminal_columns() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}
}  // namespace

std::string rate_text(double per_second) {
  char buf[32];
  if (!(per_second >= 0) || per_second >= 1e15) return "--";
  std::snprintf(buf, sizeof buf, per_second >= 99.95 ? "%.0f" : "%.3g", per_second);
  return buf;
}

std::string counted(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

namespace {
std::atomic<bool> g_step_progress{true};
}  // namespace

void show_step_progress(bool on) { g_step_progress.store(on); }

Progress::Progress(int64_t total_steps, bool terminal, bool quiet)
    : total_(total_steps), terminal_(terminal), quiet_(quiet), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::update(int64_t step, int epoch, double loss, double samples_per_s) {
  if (quiet_ || !g_step_progress.load()) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total_ - step) : -1;
  if (terminal_) {
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    // The line must fit the terminal (re-read each time: it may be resized), or each redraw
    // wraps onto a new line: the bar shrinks first, then the text is cut.
    const int columns = terminal_columns();
    char text[160];
    std::snprintf(text, sizeof text, " %lld/%lld epoch %d loss %.4f %s samples/s ETA %s",
                  static_cast<long long>(step), static_cast<long long>(total_), epoch, loss,
                  rate_text(samples_per_s).c_str(), clock_str(eta).c_str());
    const int width = std::clamp(columns - 1 - static_cast<int>(std::strlen(text)) - 2, 0, 30);
    std::string line;
    if (width >= 5) {
      const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : 0;
      line = "[" + std::string(static_cast<size_t>(filled), '=');
      if (filled < width) line += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
      line += "]";
    }
    line += text;
    if (static_cast<int>(line.size()) > columns - 1) line.resize(static_cast<size_t>(std::max(columns - 1, 0)));
    std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
    bar_shown_ = true;
  } else if (step >= next_plain_ || step == total_) {
    std::fprintf(stderr, "step %lld/%lld epoch %d loss %.4f %s samples/s ETA %s\n", static_cast<long long>(step),
                 static_cast<long long>(total_), epoch, loss, rate_text(samples_per_s).c_str(), clock_str(eta).c_str());
    next_plain_ = step + std::max<int64_t>(1, total_ / 10);
  }
  std::fflush(stderr);
}

void Progress::message(const std::string& line) {
  if (quiet_) return;
  if (bar_shown_) std::fprintf(stderr, "\r\x1b[K");
  std::fprintf(stderr, "%s\n", line.c_str());
  bar_shown_ = false;
}

void Progress::clear() {
  if (quiet_) return;
  if (bar_shown_) std::fprintf(stderr, "\r\x1b[K");
  bar_shown_ = false;
  std::fflush(stderr);
}

void Progress::finish() {
  if (quiet_) return;
  if (bar_shown_) std::fprintf(stderr, "\n");
  bar_shown_ = false;
}

}  // namespace dp::cli
