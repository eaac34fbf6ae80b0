// Σ x² in double with Thrust (gradient clipping's global norm), and y ·= s.
#include <thrust/execution_policy.h>
#include <thrust/transform_reduce.h>

#include <algorithm>

#include "engine/cuda/check.cuh"
#include "kernels/ops/elementwise.hpp"

namespace dp::cuda {

namespace {
struct Square {
  __host__ __device__ double operator()(float v) const { return double(v) * v; }
};

__global__ void scale_kernel(float* y, float s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] *= s;
}
}  // namespace

double sum_squares(Context& c, const float* x, int64_t n) {
  // Thrust's reduce returns to the host: it synchronises the stream.
  return thrust::transform_reduce(thrust::cuda::par.on(c.handles().stream), x, x + n, Square(), 0.0,
                                  thrust::plus<double>());
}

void scale(Context& c, float* y, float s, int64_t n) {
  if (n == 0) return;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  scale_kernel<<<blocks, kThreads, 0, c.handles().stream>>>(y, s, n);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
