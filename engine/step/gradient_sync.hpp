// How the replicas' gradients meet — a strategy the step calls in its reduce phase. Today:
// DataParallel's reduce onto device 0 (every replica's gradients received into buffers on device
// 0 in 10 MiB buckets and summed into the master gradients: the GPU0 hotspot's reduce buffers).
// The other shape, --sync allreduce (resident replicas, buckets all-reduced during backward,
// every device updating its own copy), is DataParallel's allreduce step
// (engine/data_parallel_allreduce.cpp, engine/allreduce/).
#pragma once
#include <memory>
#include <string>

#include "engine/step/step_state.hpp"

namespace dp {

// --sync: reduce (DataParallel's, the default) or allreduce (DistributedDataParallel's shape).
enum class SyncMode { Reduce, AllReduce };
SyncMode parse_sync_mode(const std::string& text);  // UsageError for anything else

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // master_grads (on device 0) becomes the sum of the active replicas' gradients; replica 0's
  // are already there (it writes into the master's) — unless they are 16-bit (mixed precision):
  // then s.grads[0] holds them, and the float32 sum starts from them.
  virtual void sync(StepState& s, const Tensor& master_grads) const = 0;
};

std::unique_ptr<GradientSync> make_reduce_to_device0();

}  // namespace dp
