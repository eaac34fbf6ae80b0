// Precision conversions on CUDA: the hardware's round-to-nearest-even casts (__float2bfloat16_rn,
// __float2half_rn), which kernels/half.hpp's CPU rounding reproduces bit for bit (NaN payloads aside).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/convert.hpp"

namespace dp::cuda {

namespace {


// dst[i] = cast(src[i]) over a grid-stride loop; Cast is one of the functors below.
template <typename To, typename From, typename Cast>
__global__ void convert_kernel(To* dst, const From* src, int64_t n, Cast cast) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = cast(src[i]);
}
struct ToBf16 {
  __device__ uint16_t operator()(float x) const { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
struct ToF16 {
  __device__ uint16_t operator()(float x) const { return __half_as_ushort(__float2half_rn(x)); }
};
struct FromBf16 {
  __device__ float operator()(uint16_t b) const { return __bfloat162float(__ushort_as_bfloat16(b)); }
};
struct FromF16 {
  __device__ float operator()(uint16_t b) const { return __half2float(__ushort_as_half(b)); }
};

template <typename To, typename From, typename Cast>
void launch_convert(Context& c, To* dst, const From* src, int64_t n, Cast cast) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(dst, src, n, cast);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void float_to_bf16(Context& c, uint16_t* dst, const float* src, int64_t n) { launch_convert(c, dst, src, n, ToBf16{}); }
void float_to_f16(Context& c, uint16_t* dst, const float* src, int64_t n) { launch_convert(c, dst, src, n, ToF16{}); }
void bf16_to_float(Context& c, float* dst, const uint16_t* src, int64_t n) { launch_convert(c, dst, src, n, FromBf16{}); }
void f16_to_float(Context& c, float* dst, const uint16_t* src, int64_t n) { launch_convert(c, dst, src, n, FromF16{}); }

}  // namespace dp::cuda
