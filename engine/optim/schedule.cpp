#include "engine/optim/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

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

LrSchedule parse_lr_schedule(const std::string& text, double lr, double min_lr, int64_t warmup, int64_t total_steps) {
  LrSchedule s;
  s.text = text;
  s.lr = lr;
  s.min_lr = min_lr;
  s.warmup = warmup;
  s.total = total_steps;
  if (warmup < 0) throw UsageError(setting("warmup-steps") + " must be >= 0");
  if (!std::isfinite(min_lr) || min_lr < 0) throw UsageError(setting("min-lr") + " must be a finite number >= 0");
  if (text == "constant") return s;
  if (text == "cosine") {
    s.kind = LrSchedule::Kind::Cosine;
    if (min_lr > lr) throw UsageError(setting("min-lr") + " must not exceed " + setting("lr"));
    return s;
  }
  if (text.rfind("step:", 0) == 0) {
    s.kind = LrSchedule::Kind::Step;
    std::istringstream in(text.substr(5));
    char comma = 0;
    if (!(in >> s.step_every >> comma >> s.gamma) || comma != ',' || !in.eof())
      throw UsageError(setting("lr-schedule") + " '" + text + "': expected step:N,G (e.g. step:1000,0.5)");
    if (s.step_every <= 0) throw UsageError(setting("lr-schedule") + " '" + text + "': N must be > 0");
    if (!std::isfinite(s.gamma) || s.gamma < 0) throw UsageError(setting("lr-schedule") + " '" + text +
                                                                 "': G must be a finite number >= 0");
    return s;
  }
  throw UsageError(setting("lr-schedule") + " '" + text + "': expected constant, cosine or step:N,G");
}

}  // namespace dp
