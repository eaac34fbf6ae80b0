// Σ x² in double (gradient clipping's global norm, fp16's inf/NaN check) and y ·= s. The sum is
// two fixed-shape passes (blocks' partial sums, then one block over them: the same bits every
// run) with its partials from the device's allocator; nothing here waits for the device.
// (Thrust's transform_reduce did it with a cudaMalloc and a cudaFree per call: the free waits for
// the whole GPU, every logical device's stream on it.)
#include <algorithm>

#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/elementwise.hpp"

namespace dp::cuda {

namespace {

constexpr int kSumThreads = 256;
constexpr int64_t kMaxPartials = 1024;

// A block's threads' shares of `s`, summed by a tree in shared memory; thread 0 gets the total.
__device__ double block_sum(double s) {
  __shared__ double part[kSumThreads];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  return part[0];
}

__global__ void square_partials_kernel(const float* x, int64_t n, double* partials) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t{kSumThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kSumThreads)
    s += double(x[i]) * x[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// found_inf (optional): 1 when the total is inf or NaN, else 0.
__global__ void sum_partials_kernel(const double* partials, int64_t count, double* out, int32_t* found_inf) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += kSumThreads) s += partials[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) {
    *out = total;
    if (found_inf) *found_inf = isfinite(total) ? 0 : 1;
  }
}

// y ·= clip / (√sum + 1e-6) when that is below 1: clip_grad_norm_'s coefficient, in double like
// the host's, applied as float32. With found_inf set the step is skipped: leave y as it is.
__global__ void clip_kernel(float* y, const double* sum, float clip, int64_t n, const int32_t* found_inf) {
  if (found_inf && *found_inf) return;
  const double coef = clip / (sqrt(*sum) + 1e-6);
  if (!(coef < 1)) return;
  const float s = static_cast<float>(coef);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] *= s;
}

__global__ void scale_kernel(float* y, ScalarArg by, int64_t n) {
  const float s = by.get();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] *= s;
}

}  // namespace

void sum_squares_and_clip(Context& c, ScratchMemory& alloc, float* x, int64_t n, float clip, double* out,
                          int32_t* found_inf) {
  cudaStream_t s = c.handles().stream;
  // At least one partial (a zero when n is 0), so the sum and the flag are written in stream order.
  const int64_t blocks = std::max<int64_t>(1, std::min(kMaxPartials, (n + kSumThreads - 1) / kSumThreads));
  ScopedBlock scratch(alloc, static_cast<size_t>(blocks + 1) * sizeof(double));  // freed stream-ordered
  double* partials = scratch.at<double>();
  square_partials_kernel<<<static_cast<unsigned>(blocks), kSumThreads, 0, s>>>(x, n, partials);
  DP_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kSumThreads, 0, s>>>(partials, blocks, partials + blocks, found_inf);
  DP_CUDA_CHECK_LAUNCH();
  DP_CUDA_CHECK(cudaMemcpyAsync(out, partials + blocks, sizeof(double), cudaMemcpyDeviceToHost, s));
  if (clip > 0 && n > 0) {
    clip_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, partials + blocks, clip, n, found_inf);
    DP_CUDA_CHECK_LAUNCH();
  }
}

void scale(Context& c, float* y, ScalarArg s, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(y, s, n);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
