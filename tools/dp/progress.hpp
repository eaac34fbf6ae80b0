// Training progress on stderr: a live bar on a terminal (fitted to its width), a plain line now
// and then otherwise.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace dp::cli {

// A rate as a person reads it: whole numbers from 100 up, three significant digits below
// ("2659", "41.3", "0.512"), never a bare "0".
std::string rate_text(double per_second);
// "1 step", "2 steps".
std::string counted(int64_t n, const std::string& noun);

// Whether training prints its step lines (on by default): a program that runs dp's commands in its own
// process and shows progress its own way (the Python package: a tqdm bar, or nothing) turns them off.
void show_step_progress(bool on);

class Progress {
 public:
  // quiet: prints nothing (the ranks other than 0 under mpirun).
  Progress(int64_t total_steps, bool terminal, bool quiet = false);
  void update(int64_t step, int epoch, double loss, double samples_per_s);
  void message(const std::string& line);  // a line on stderr that does not break the bar
  void clear();  // take the bar off the line (before printing results on stdout)
  void finish();

 private:
  int64_t total_;
  bool terminal_, quiet_;
  bool bar_shown_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t next_plain_ = 1;
};

}  // namespace dp::cli
