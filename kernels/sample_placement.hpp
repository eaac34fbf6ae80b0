// Where one process's samples sit in an optimizer step's whole batch over every process: its
// sample j (counted over the step's micro-batches) is sample j·stride + offset of the batch. One
// process: {1, 0}. Under mpirun it is how the loader shards a batch (BatchSource::placement:
// interleaved, as DistributedSampler deals samples, {count, rank}). Dropout draws a sample's mask
// by that index (kernels/dropout_mask.hpp), so processes draw one process's masks.
#pragma once
#include <cstdint>

namespace dp {

struct SamplePlacement {
  int64_t stride = 1, offset = 0;
  bool operator==(const SamplePlacement&) const = default;
};

}  // namespace dp
