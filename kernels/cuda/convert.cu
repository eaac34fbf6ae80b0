// Precision conversions on CUDA: the hardware's round-to-nearest-even casts (__float2bfloat16_rn,
// __float2half_rn), which kernels/half.hpp's CPU rounding reproduces bit for bit (NaN payloads aside).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "engine/cuda/check.cuh"
#include "kernels/ops/convert.hpp"

namespace dp::cuda {

namespace {

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

__global__ void to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}
__global__ void to_f16_kernel(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}
__global__ void from_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
}
__global__ void from_f16_kernel(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = __half2float(__ushort_as_half(src[i]));
}

}  // namespace

void float_to_bf16(Context& c, uint16_t* dst, const float* src, int64_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dst, src, n);
  DP_CUDA_CHECK_LAUNCH();
}
void float_to_f16(Context& c, uint16_t* dst, const float* src, int64_t n) {
  if (n == 0) return;
  to_f16_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dst, src, n);
  DP_CUDA_CHECK_LAUNCH();
}
void bf16_to_float(Context& c, float* dst, const uint16_t* src, int64_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dst, src, n);
  DP_CUDA_CHECK_LAUNCH();
}
void f16_to_float(Context& c, float* dst, const uint16_t* src, int64_t n) {
  if (n == 0) return;
  from_f16_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dst, src, n);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
