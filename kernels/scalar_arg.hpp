// A float a kernel reads when it runs rather than when it is enqueued: from device memory when
// `at` is set, else `value`. The step passes its per-step values this way (the learning rate,
// AdamW's bias corrections, fp16's loss scale; engine/optim/step_scalars.hpp), so every kernel
// argument of a step is the same from step to step — what replaying a captured step (a CUDA
// graph, whose kernel arguments are frozen at capture) needs. On a host device, device memory is
// this process's memory, so the CPU kernels read it the same way.
#pragma once

#include "kernels/host_device.hpp"

namespace dp {

struct ScalarArg {
  float value = 0;
  const float* at = nullptr;  // device memory (host memory on a host device), read by the kernel
  ScalarArg() = default;
  ScalarArg(float v) : value(v) {}  // NOLINT: a constant is a scalar argument
  static ScalarArg in_device_memory(const float* p) {
    ScalarArg a;
    a.at = p;
    return a;
  }
  DP_HOST_DEVICE float get() const { return at ? *at : value; }
};

}  // namespace dp
