// Swin's window partition and merge (kernels/ops/window_partition.hpp): one thread an element of
// the destination, its source from the shape's index arithmetic.
#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/window_partition.hpp"

namespace dp::cuda {

namespace {

template <typename T>
__global__ void partition_kernel(T* tokens, const T* image, WindowPartitionShape s, int64_t n) {
  const int64_t per_sample = s.windows() * s.tokens();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % s.C, r = i / s.C;
    int64_t y = 0, x = 0;
    tokens[i] = s.pixel_of(r % per_sample, y, x) ? image[((r / per_sample * s.H + y) * s.W + x) * s.C + c] : T{0};
  }
}

template <typename T>
__global__ void merge_kernel(T* image, const T* tokens, WindowPartitionShape s, int64_t n) {
  const int64_t per_sample = s.windows() * s.tokens();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t c = i % s.C, p = i / s.C, b = p / (s.H * s.W), y = p / s.W % s.H, x = p % s.W;
    image[i] = tokens[(b * per_sample + s.row_of(y, x)) * s.C + c];
  }
}

// f(T{}) for the unsigned type of elem_bytes: the kernels move elements, never compute on them.
template <typename F>
void by_element_size(size_t elem_bytes, F&& f) {
  switch (elem_bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    default: return f(uint32_t{});
  }
}

}  // namespace

void window_partition(Context& c, void* tokens, const void* image, size_t elem_bytes, const WindowPartitionShape& s) {
  const int64_t n = s.B * s.windows() * s.tokens() * s.C;
  if (n == 0) return;
  by_element_size(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    partition_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(static_cast<T*>(tokens),
                                                                         static_cast<const T*>(image), s, n);
  });
  DP_CUDA_CHECK_LAUNCH();
}

void window_merge(Context& c, void* image, const void* tokens, size_t elem_bytes, const WindowPartitionShape& s) {
  const int64_t n = s.B * s.H * s.W * s.C;
  if (n == 0) return;
  by_element_size(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    merge_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(static_cast<T*>(image),
                                                                     static_cast<const T*>(tokens), s, n);
  });
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
