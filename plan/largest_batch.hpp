// dp plan --max-batch: the largest global batch whose plan fits the devices.
#pragma once
#include <cstdint>
#include <functional>

namespace dp {

// One plan at a batch size: whether it fits and, when it does, the most bytes any device held.
struct BatchProbe {
  bool fits = false;
  int64_t peak = 0;
};

// The largest batch whose probe fits, assuming every batch below one that fits fits too, up to
// `limit`: 0 when not even 1 fits; the last doubling of `start` when every doubling up to `limit`
// fits (there is no larger answer to look for). Each probe is one plan, so the search takes as few
// as it can. A plan's peak is close to affine in the batch (activations grow with each device's
// chunk; a staircase, as chunks round up), so once `start` and its double fit, the line through
// their peaks says where `capacity` is reached: the search probes one above and there (a few times,
// each new fitting plan a better line), walks down from a guess that failed by 2, 4 and 8
// batches, and halves what is left. Without `capacity` (or with peaks that do not grow) it is the plain search: doubling
// from `start` (halving when it does not fit), then bisection. Either way the answer is the same
// for a monotone probe.
int64_t largest_fitting_batch(int64_t start, const std::function<BatchProbe(int64_t)>& probe, int64_t capacity = 0,
                              int64_t limit = int64_t{1} << 20);

}  // namespace dp
