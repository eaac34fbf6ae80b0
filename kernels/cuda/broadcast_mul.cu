// mul_planes and plane_dot (kernels/ops/broadcast_mul.hpp) on float32 and 16-bit storage.
#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/broadcast_mul.hpp"

namespace dp::cuda {

namespace {

template <typename T>
__global__ void mul_planes_kernel(T* out, const T* a, const T* b, int64_t planes, int64_t size, bool b_per_plane) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < planes * size;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = store_as<T>(load_float(a[i]) * load_float(b[b_per_plane ? i / size : i]));
}

// One warp per plane: products summed in double, strided, then a shuffle reduction (as the
// global average pool's).
template <typename T>
__global__ void plane_dot_kernel(T* out, const T* g, const T* a, int64_t planes, int64_t size) {
  const int64_t p = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (p >= planes) return;
  double s = 0;
  for (int64_t i = threadIdx.x; i < size; i += 32)
    s += static_cast<double>(load_float(g[p * size + i])) * load_float(a[p * size + i]);
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (threadIdx.x == 0) out[p] = store_as<T>(static_cast<float>(s));
}

}  // namespace

void mul_planes(Context& c, DType t, void* out, const void* a, const void* b, int64_t planes, int64_t size,
                bool b_per_plane) {
  if (planes * size == 0) return;
  with_float_type(t, "mul_planes", [&](auto tag) {
    using T = decltype(tag);
    mul_planes_kernel<<<blocks_for(planes * size), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), planes, size, b_per_plane);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void plane_dot(Context& c, DType t, void* out, const void* g, const void* a, int64_t planes, int64_t size) {
  if (planes == 0) return;
  const dim3 block(32, 8);
  const unsigned blocks = static_cast<unsigned>((planes + block.y - 1) / block.y);
  with_float_type(t, "plane_dot", [&](auto tag) {
    using T = decltype(tag);
    plane_dot_kernel<<<blocks, block, 0, c.handles().stream>>>(static_cast<T*>(out), static_cast<const T*>(g),
                                                               static_cast<const T*>(a), planes, size);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void mul_planes(Context& c, float* out, const float* a, const float* b, int64_t planes, int64_t size,
                bool b_per_plane) {
  mul_planes(c, DType::F32, out, a, b, planes, size, b_per_plane);
}

void plane_dot(Context& c, float* out, const float* g, const float* a, int64_t planes, int64_t size) {
  plane_dot(c, DType::F32, out, g, a, planes, size);
}

}  // namespace dp::cuda
