// add_every_sample, mul_every_sample and sum_samples (kernels/ops/every_sample.hpp) on float32 and
// 16-bit storage: a thread an element; the sum by column_sum (a fixed order, in double).
#include "core/cuda/check.cuh"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/every_sample.hpp"

namespace dp::cuda {

namespace {

template <typename T>
__global__ void add_every_sample_kernel(T* y, const T* x, int64_t total, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = store_as<T>(load_float(y[i]) + load_float(x[i % n]));
}

template <typename T>
__global__ void mul_every_sample_kernel(T* out, const T* a, const T* b, int64_t total, int64_t planes, int64_t size,
                                        bool b_per_plane) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t in_sample = i % (planes * size);
    out[i] = store_as<T>(load_float(a[i]) * load_float(b[b_per_plane ? in_sample / size : in_sample]));
  }
}

}  // namespace

void add_every_sample(Context& c, DType t, void* y, const void* x, int64_t rows, int64_t n) {
  if (rows * n == 0) return;
  with_float_type(t, "add_every_sample", [&](auto tag) {
    using T = decltype(tag);
    add_every_sample_kernel<<<blocks_for(rows * n), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(y), static_cast<const T*>(x), rows * n, n);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void mul_every_sample(Context& c, DType t, void* out, const void* a, const void* b, int64_t rows, int64_t planes,
                      int64_t size, bool b_per_plane) {
  const int64_t total = rows * planes * size;
  if (total == 0) return;
  with_float_type(t, "mul_every_sample", [&](auto tag) {
    using T = decltype(tag);
    mul_every_sample_kernel<<<blocks_for(total), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), total, planes, size, b_per_plane);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void sum_samples(Context& c, DType t, float* out, const void* in, int64_t rows, int64_t n) {
  with_float_type(t, "sum_samples", [&](auto tag) {
    using T = decltype(tag);
    column_sum(c, out, static_cast<const T*>(in), rows, n);
  });
}

void add_every_sample(Context& c, float* y, const float* x, int64_t rows, int64_t n) {
  add_every_sample(c, DType::F32, y, x, rows, n);
}
void mul_every_sample(Context& c, float* out, const float* a, const float* b, int64_t rows, int64_t planes,
                      int64_t size, bool b_per_plane) {
  mul_every_sample(c, DType::F32, out, a, b, rows, planes, size, b_per_plane);
}
void sum_samples(Context& c, float* out, const float* in, int64_t rows, int64_t n) {
  sum_samples(c, DType::F32, out, in, rows, n);
}

}  // namespace dp::cuda
