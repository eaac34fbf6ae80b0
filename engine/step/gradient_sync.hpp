// How the replicas' gradients meet in DataParallel's step shape (engine/shapes/data_parallel_shape.hpp):
// the reduce onto device 0 (every replica's gradients received into buffers on device 0 in 10 MiB
// buckets and summed into the master gradients: the GPU0 hotspot's reduce buffers). The other
// shapes meet their gradients their own way (engine/shapes/).
#pragma once
#include <memory>
#include <string>

#include "engine/step/sync_mode.hpp"
#include "engine/step/step_state.hpp"

namespace dp {

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
