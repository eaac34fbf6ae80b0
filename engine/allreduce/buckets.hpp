// DDP's gradient buckets over the flat gradient array: consecutive ranges of about bucket_bytes,
// made from the end of the array backwards (reverse registration order, the order backward
// produces gradients in), so the first bucket is ready first. A bucket may end inside a tensor;
// a module whose parameters it touches must have run backward before the bucket is ready.
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.hpp"

namespace dp {

struct GradBucket {
  int64_t begin = 0, end = 0;  // floats of the flat gradient array
  std::vector<int> leaves;     // the param modules (StateEntry::leaf) with parameters in it
};

std::vector<GradBucket> plan_buckets(const ModelLayout& layout, int64_t bucket_bytes);

}  // namespace dp
