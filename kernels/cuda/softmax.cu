// softmax, log_softmax and causal_fill (kernels/ops/softmax.hpp): one warp a row, sums in double
// by shuffles (as the attention kernels' causal softmax).
#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/softmax.hpp"

namespace dp::cuda {

namespace {

__global__ void softmax_kernel(float* out, const float* in, int64_t rows, int64_t n, bool log) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const float* x = in + r * n;
  float* y = out + r * n;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += 32) mx = fmaxf(mx, x[j]);
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  double sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += 32) sum += exp(static_cast<double>(x[j] - mx));
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (log) {
    const double lse = static_cast<double>(mx) + ::log(sum);
    for (int64_t j = threadIdx.x; j < n; j += 32) y[j] = static_cast<float>(static_cast<double>(x[j]) - lse);
  } else {
    for (int64_t j = threadIdx.x; j < n; j += 32) y[j] = static_cast<float>(exp(static_cast<double>(x[j] - mx)) / sum);
  }
}

__global__ void softmax_backward_kernel(float* din, const float* dout, const float* out, int64_t rows, int64_t n,
                                        bool log) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const float* dy = dout + r * n;
  const float* y = out + r * n;
  float* dx = din + r * n;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < n; j += 32) dot += log ? static_cast<double>(dy[j]) : double(dy[j]) * y[j];
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  for (int64_t j = threadIdx.x; j < n; j += 32)
    dx[j] = log ? static_cast<float>(dy[j] - exp(static_cast<double>(y[j])) * dot) : static_cast<float>(y[j] * (dy[j] - dot));
}

__global__ void causal_fill_kernel(float* x, int64_t total, int64_t rows, int64_t cols, float value) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e % cols, i = e / cols % rows;
    if (j > i) x[e] = value;
  }
}

dim3 row_grid(int64_t rows, dim3 block) { return dim3(static_cast<unsigned>((rows + block.y - 1) / block.y)); }

}  // namespace

void softmax_forward(Context& c, float* out, const float* in, int64_t rows, int64_t n, bool log) {
  if (rows * n == 0) return;
  const dim3 block(32, 8);
  softmax_kernel<<<row_grid(rows, block), block, 0, c.handles().stream>>>(out, in, rows, n, log);
  DP_CUDA_CHECK_LAUNCH();
}

void softmax_backward(Context& c, float* din, const float* dout, const float* out, int64_t rows, int64_t n, bool log) {
  if (rows * n == 0) return;
  const dim3 block(32, 8);
  softmax_backward_kernel<<<row_grid(rows, block), block, 0, c.handles().stream>>>(din, dout, out, rows, n, log);
  DP_CUDA_CHECK_LAUNCH();
}

void causal_fill(Context& c, float* x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  const int64_t total = matrices * rows * cols;
  if (total == 0) return;
  causal_fill_kernel<<<blocks_for(total), kThreads, 0, c.handles().stream>>>(x, total, rows, cols, value);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
