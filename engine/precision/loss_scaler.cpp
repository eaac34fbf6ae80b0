#include "engine/precision/loss_scaler.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/setting_name.hpp"

namespace dp {

LossScaler::LossScaler(const LossScaleOptions& o) : enabled_(true), scale_(static_cast<float>(o.init_scale)), options_(o) {
  if (!(o.init_scale > 0) || !std::isfinite(static_cast<float>(o.init_scale)))
    throw UsageError(setting("loss-scale") + " must be a positive, finite float32 (GradScaler's init_scale), got " +
                     std::to_string(o.init_scale));
  if (o.growth_interval < 1)
    throw UsageError(setting("loss-scale-growth-interval") + " must be at least 1 (GradScaler's growth_interval)");
  if (!(o.growth_factor > 1) || !(o.backoff_factor > 0 && o.backoff_factor < 1))
    throw UsageError("loss scaling needs growth factor > 1 and backoff factor in (0, 1)");
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  // torch's _amp_update_scale_: back off at once; grow after growth_interval clean steps, when
  // the grown scale is still finite.
  if (found_inf) {
    scale_ *= static_cast<float>(options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const float grown = scale_ * static_cast<float>(options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

void LossScaler::restore(const State& s) {
  if (!(s.scale > 0) || !std::isfinite(static_cast<float>(s.scale)) || s.growth_tracker < 0)
    throw RuntimeError("loss scale state: scale " + std::to_string(s.scale) + ", growth tracker " +
                       std::to_string(s.growth_tracker) + " (expected a positive finite scale)");
  scale_ = static_cast<float>(s.scale);
  growth_tracker_ = s.growth_tracker;
}

}  // namespace dp
