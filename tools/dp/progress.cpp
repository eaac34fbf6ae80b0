#include "tools/dp/progress.hpp"

#include <cstdio>

namespace dp::cli {

namespace {
std::string clock_str(double seconds) {
  if (seconds < 0 || seconds > 1e7) return "--:--";
  char buf[32];
  const long s = static_cast<long>(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}
}  // namespace

Progress::Progress(int64_t total_steps, bool terminal)
    : total_(total_steps), terminal_(terminal), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void Progress::update(int64_t step, int epoch, double loss, double samples_per_s) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total_ - step) : -1;
  if (terminal_) {
    if (step != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : 0;
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
    std::fprintf(stderr, "\r[%s] %lld/%lld epoch %d loss %.4f %.0f samples/s ETA %s \x1b[K", bar.c_str(),
                 static_cast<long long>(step), static_cast<long long>(total_), epoch, loss, samples_per_s,
                 clock_str(eta).c_str());
    bar_shown_ = true;
  } else if (step >= next_plain_ || step == total_) {
    std::fprintf(stderr, "step %lld/%lld epoch %d loss %.4f %.0f samples/s ETA %s\n", static_cast<long long>(step),
                 static_cast<long long>(total_), epoch, loss, samples_per_s, clock_str(eta).c_str());
    next_plain_ = step + std::max<int64_t>(1, total_ / 10);
  }
  std::fflush(stderr);
}

void Progress::message(const std::string& line) {
  if (bar_shown_) std::fprintf(stderr, "\r\x1b[K");
  std::fprintf(stderr, "%s\n", line.c_str());
  bar_shown_ = false;
}

void Progress::finish() {
  if (bar_shown_) std::fprintf(stderr, "\n");
  bar_shown_ = false;
}

}  // namespace dp::cli
