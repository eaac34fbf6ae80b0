#include "engine/optim/schedule.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

double LrSchedule::at(int64_t s) const {
  if (s < warmup) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup);
  switch (kind) {
    case Kind::Constant: return lr;
    case Kind::Cosine: {
      const double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
      return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * static_cast<double>(s - warmup) / span));
    }
    case Kind::Step: return lr * std::pow(gamma, static_cast<double>((s - warmup) / step_every));
  }
  return lr;
}

void check_lr_schedule(const LrSchedule& s, const std::string& as_written) {
  if (s.warmup < 0) throw UsageError(setting("warmup-steps") + " must be >= 0");
  if (!std::isfinite(s.min_lr) || s.min_lr < 0) throw UsageError(setting("min-lr") + " must be a finite number >= 0");
  if (s.kind == LrSchedule::Kind::Cosine && s.min_lr > s.lr)
    throw UsageError(setting("min-lr") + " must not exceed " + setting("lr"));
  if (s.kind == LrSchedule::Kind::Step) {
    if (s.step_every <= 0) throw UsageError(setting("lr-schedule") + " '" + as_written + "': N must be > 0");
    if (!std::isfinite(s.gamma) || s.gamma < 0)
      throw UsageError(setting("lr-schedule") + " '" + as_written + "': G must be a finite number >= 0");
  }
}

std::string schedule_text(const LrSchedule& s) {
  switch (s.kind) {
    case LrSchedule::Kind::Constant: return "constant";
    case LrSchedule::Kind::Cosine: return "cosine";
    case LrSchedule::Kind::Step: {
      char gamma[32];
      const auto end = std::to_chars(gamma, gamma + sizeof gamma, s.gamma).ptr;  // the shortest exact form
      return "step:" + std::to_string(s.step_every) + "," + std::string(gamma, end);
    }
  }
  return "constant";
}

}  // namespace dp
