// Learning-rate schedules (--lr-schedule), as a function of the step index s (0 for the first
// step) in a run of S steps:
//   constant   lr
//   cosine     lr·(s+1)/W while s < W (--warmup-steps), then
//              min_lr + ½(lr − min_lr)(1 + cos(π·(s − W)/max(1, S − W)))
//   step:N,G   lr·G^⌊s/N⌋ (after the warm-up, if any)
// A warm-up applies to every schedule.
#pragma once
#include <cstdint>
#include <string>

namespace dp {

struct LrSchedule {
  enum class Kind { Constant, Cosine, Step };
  Kind kind = Kind::Constant;
  double lr = 0.05, min_lr = 0;
  int64_t warmup = 0, total = 1;
  int64_t step_every = 1;
  double gamma = 1;
  std::string text = "constant";
  double at(int64_t s) const;
};

// UsageError naming the problem (an unknown kind, N <= 0, G not finite or < 0, warm-up < 0, ...).
LrSchedule parse_lr_schedule(const std::string& text, double lr, double min_lr, int64_t warmup, int64_t total_steps);

}  // namespace dp
