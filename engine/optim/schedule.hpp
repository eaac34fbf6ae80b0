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
  double at(int64_t s) const;
};

// UsageError naming the problem (N <= 0, G not finite or < 0, warm-up < 0, min_lr above lr for
// cosine, ...); `as_written`: the schedule as its user gave it, for the message.
void check_lr_schedule(const LrSchedule& s, const std::string& as_written);
// The schedule as --lr-schedule writes it: constant, cosine, step:N,G.
std::string schedule_text(const LrSchedule& s);

}  // namespace dp
