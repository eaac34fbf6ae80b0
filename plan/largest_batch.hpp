// dp plan --max-batch: the largest global batch whose plan fits the devices.
#pragma once
#include <cstdint>
#include <functional>

namespace dp {

// The largest batch for which fits(batch) holds, assuming it holds below any batch that fits:
// doubling from `start` while at most `limit` (or halving, when `start` does not fit), then
// bisecting between the last that fits and the first that does not. 0 when not even 1 fits; the
// last doubling when every doubling up to `limit` fits. Each call of fits is one plan, so the
// search takes about 2·log2(answer / start) of them.
int64_t largest_fitting_batch(int64_t start, const std::function<bool(int64_t)>& fits, int64_t limit = int64_t{1} << 20);

}  // namespace dp
