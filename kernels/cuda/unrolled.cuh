// The memory-bound element-wise pattern of the float32 kernels (ReLU, add, batch norm's passes):
// a thread takes kUnroll elements a pass, a grid's stride apart (a warp's accesses stay adjacent),
// and issues every load of the pass before its first store — one load in flight a thread left
// ReLU at 0.6x PyTorch's vectorised kernels (resnet18, H100). An element is read and written by
// one thread only, so the output may be one of the inputs. Launch with blocks_for(n, kUnroll)
// (and with_index_type(n, f, kUnroll) for 32-bit indices). The storage type T may be 16-bit
// (half.cuh): the values reach f as float32 and its result is rounded once on store.
#pragma once
#include <cstdint>

#include "kernels/cuda/half.cuh"

namespace dp::cuda {

constexpr int kUnroll = 4;

// out[i] = f(x, i) with x[k] = in[k][i], for every i < n; I: the index type.
template <typename I, int kInputs, typename T, typename F>
__device__ void unrolled_map(T* out, const T* const (&in)[kInputs], I n, F f) {
  const I stride = static_cast<I>(gridDim.x) * static_cast<I>(blockDim.x);
  for (I base = static_cast<I>(blockIdx.x) * static_cast<I>(blockDim.x) + static_cast<I>(threadIdx.x); base < n;
       base += stride * kUnroll) {
    float v[kUnroll][kInputs];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < kInputs; ++k)
        if (base + u * stride < n) v[u][k] = load_float(in[k][base + u * stride]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * stride < n) out[base + u * stride] = store_as<T>(f(v[u], base + u * stride));
  }
}

}  // namespace dp::cuda
