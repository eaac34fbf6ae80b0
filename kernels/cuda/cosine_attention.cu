// Swin V2's cosine attention's rows (kernels/ops/cosine_attention.hpp): a thread a row, the CPU
// reference's arithmetic (the shared row functions).
#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/cosine_attention.hpp"

namespace dp::cuda {

namespace {

__global__ void forward_kernel(float* qkv, float* norms, const float* logit_scale, CosineShape s, int64_t n) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < n; r += int64_t{gridDim.x} * blockDim.x)
    cosine_forward_row(r, qkv, norms, logit_scale, s);
}

__global__ void backward_kernel(float* dqkv, const float* qkv, const float* norms, const float* logit_scale,
                                float* row_dots, CosineShape s, int64_t n) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < n; r += int64_t{gridDim.x} * blockDim.x)
    cosine_backward_row(r, dqkv, qkv, norms, logit_scale, row_dots, s);
}

}  // namespace

void cosine_qk_forward(Context& c, float* qkv, float* norms, const float* logit_scale, const CosineShape& s) {
  const int64_t n = s.rows() * 2 * s.H;
  if (n == 0) return;
  forward_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(qkv, norms, logit_scale, s, n);
  DP_CUDA_CHECK_LAUNCH();
}

void cosine_qk_backward(Context& c, float* dqkv, const float* qkv, const float* norms, const float* logit_scale,
                        float* row_dots, const CosineShape& s) {
  const int64_t n = s.rows() * 2 * s.H;
  if (n == 0) return;
  backward_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dqkv, qkv, norms, logit_scale, row_dots, s, n);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
