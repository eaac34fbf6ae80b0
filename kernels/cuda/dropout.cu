// Dropout's mask drawn per element from the pass's key in device memory (kernels/dropout_mask.hpp):
// the same elements as the CPU reference drops.
#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/dropout.hpp"

namespace dp::cuda {

namespace {

__global__ void dropout_kernel(float* out, const float* in, int64_t n, int64_t per_sample, DropoutMask mask,
                               uint32_t threshold, float scale) {
  const uint64_t key = mask.pass_key();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / per_sample;
    const uint64_t state = dropout_sample_state(key, mask.site, mask.sample(s));
    out[i] = in[i] * dropout_factor(state, mask.draw_of(i - s * per_sample), threshold, scale);
  }
}

}  // namespace

void dropout_apply(Context& c, float* out, const float* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask) {
  const int64_t n = samples * per_sample;
  if (n == 0) return;
  dropout_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(out, in, n, per_sample, mask, mask.threshold(),
                                                                      mask.scale());
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
