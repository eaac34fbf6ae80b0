#include "engine/comm/buckets.hpp"

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

std::vector<GradBucket> plan_module_buckets(const ModelLayout& layout, int64_t bucket_bytes) {
  // Each module's first parameter: its range runs to the next module's first (or the end).
  std::vector<std::pair<int64_t, int>> starts;  // (offset, leaf), in layout order
  for (const auto& e : layout.entries)
    if (!e.buffer() && (starts.empty() || starts.back().second != e.leaf)) starts.push_back({e.offset, e.leaf});
  const int64_t per = std::max<int64_t>(1, bucket_bytes / 4);
  std::vector<GradBucket> buckets;
  int64_t end = layout.parameter_count;
  GradBucket open{end, end, {}};
  for (auto it = starts.rbegin(); it != starts.rend(); ++it) {  // from the end: backward's order
    open.begin = it->first;
    open.leaves.push_back(it->second);
    if (open.end - open.begin >= per || std::next(it) == starts.rend()) {
      if (std::next(it) == starts.rend()) open.begin = 0;  // anything before the first module's parameters
      buckets.push_back(open);
      open = GradBucket{open.begin, open.begin, {}};
    }
  }
  return buckets;
}

std::vector<Tensor> ring_receive_buffers(const std::vector<Device*>& devices, const std::vector<GradBucket>& buckets) {
  int64_t largest = 0;
  for (const auto& b : buckets) largest = std::max(largest, b.end - b.begin);
  const auto n = static_cast<int64_t>(devices.size());
  std::vector<Tensor> recv;
  for (Device* dev : devices) recv.push_back(Tensor::empty(*dev, {largest / n + 1}, MemCategory::CommBuffers));
  return recv;
}

}  // namespace dp
