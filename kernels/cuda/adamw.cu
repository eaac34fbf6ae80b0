// AdamW: one thread per element, grid-stride, the same arithmetic as the CPU reference.
#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/adamw.hpp"

namespace dp::cuda {

namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, AdamWStep s, int64_t n,
                             const int32_t* skip_if) {
  if (skip_if && *skip_if) return;
  const float decay = 1.f - s.lr.get() * s.weight_decay, step_size = s.step_size.get(), bc2_sqrt = s.bc2_sqrt.get();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float pi = p[i] * decay;
    const float mi = m[i] * s.beta1 + (1.f - s.beta1) * g[i];
    const float vi = v[i] * s.beta2 + (1.f - s.beta2) * (g[i] * g[i]);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + s.eps));
  }
}

}  // namespace

void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  int64_t n, const int32_t* skip_if) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(param, grad, exp_avg, exp_avg_sq, s, n, skip_if);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
