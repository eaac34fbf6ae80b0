// The columns [O, ld) of a row-major [B, ld] matrix written zero: the padding of an output stored
// wider than its columns (Linear's `ldo`), so that the tensor holds no stale bytes (a kernel, not
// cudaMemset2DAsync: a captured step records it like the GEMM beside it).
#pragma once
#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"

namespace dp::cuda {

namespace row_padding_detail {
template <typename T>
__global__ void zero_padding_kernel(T* out, int64_t B, int64_t O, int64_t ld) {
  const int64_t width = ld - O, total = B * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    out[i / width * ld + O + i % width] = T{};
}
}  // namespace row_padding_detail

// T: the element's size is all that matters (float, or a 16-bit type's bits).
template <typename T>
void zero_row_padding(cudaStream_t s, T* out, int64_t B, int64_t O, int64_t ld) {
  if (ld <= O || B == 0) return;
  row_padding_detail::zero_padding_kernel<<<blocks_for(B * (ld - O)), kThreads, 0, s>>>(out, B, O, ld);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
