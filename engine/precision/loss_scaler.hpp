// Dynamic loss scaling for fp16, with torch.cuda.amp.GradScaler's semantics: the loss gradient is
// multiplied by the scale (so small gradients survive float16), the summed float32 gradients are
// divided by it before clipping and the update, and a step whose gradients hold an inf or NaN is
// skipped — weights and optimizer state untouched — while the scale is multiplied by the backoff
// factor (0.5). After growth_interval clean steps in a row it grows by the growth factor (2).
// The scale is a float32, as GradScaler's scale tensor.
#pragma once
#include <cstdint>

#include "engine/precision/precision.hpp"

namespace dp {

class LossScaler {
 public:
  LossScaler() = default;  // disabled: scale 1, never skips
  explicit LossScaler(const LossScaleOptions& o);
  bool enabled() const { return enabled_; }
  float scale() const { return enabled_ ? scale_ : 1.f; }
  // After a step's gradients are known (found_inf: some were inf or NaN); GradScaler.update().
  void update(bool found_inf);

  // What a checkpoint keeps (GradScaler.state_dict's "scale" and "_growth_tracker").
  struct State {
    double scale = 65536.0;
    int64_t growth_tracker = 0;
  };
  State state() const { return {scale_, growth_tracker_}; }
  void restore(const State& s);  // RuntimeError for a non-positive or non-finite scale

 private:
  bool enabled_ = false;
  float scale_ = 1.f;
  int64_t growth_tracker_ = 0;
  LossScaleOptions options_;
};

}  // namespace dp
