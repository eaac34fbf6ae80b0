#include "engine/allreduce/buckets.hpp"

#include <algorithm>

namespace dp {

std::vector<GradBucket> plan_buckets(const ModelLayout& layout, int64_t bucket_bytes) {
  const int64_t total = layout.parameter_count;
  // A multiple of the layout's alignment, so bucket edges keep vector loads aligned.
  const int64_t per = std::max<int64_t>(kLayoutAlign, bucket_bytes / 4 / kLayoutAlign * kLayoutAlign);
  std::vector<GradBucket> buckets;
  for (int64_t end = total; end > 0; end -= per) buckets.push_back({std::max<int64_t>(0, end - per), end, {}});
  for (auto& b : buckets) {
    for (const auto& e : layout.entries) {
      if (e.buffer()) continue;
      const int64_t lo = e.offset, hi = e.offset + numel(e.shape);
      if (lo < b.end && hi > b.begin && std::find(b.leaves.begin(), b.leaves.end(), e.leaf) == b.leaves.end())
        b.leaves.push_back(e.leaf);
    }
  }
  return buckets;
}

}  // namespace dp
