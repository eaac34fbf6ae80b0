// SyncBatchNorm's pieces on CUDA (--sync-bn): one block per channel, its threads striding over
// the channel's N·HW values; sums in double like the CPU reference (kernels/cpu/batchnorm.cpp).
#include "engine/cuda/check.cuh"
#include "kernels/ops/batchnorm.hpp"

namespace dp::cuda {

namespace {

constexpr int kThreads = 256;

// Block-wide sum of one double per thread (kThreads threads).
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

__device__ float at(const float* x, int64_t i, int64_t c, int64_t C, int64_t HW) {
  return x[((i / HW) * C + c) * HW + i % HW];  // value i of channel c, over [N, C, HW]
}

__global__ void stats_kernel(float* mean, float* var, const float* in, int64_t N, int64_t C, int64_t HW) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, M = N * HW;
  double s = 0;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) s += at(in, i, c, C, HW);
  const double m = block_sum(s, shared) / static_cast<double>(M);
  double q = 0;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const double d = at(in, i, c, C, HW) - static_cast<float>(m);
    q += d * d;
  }
  const double v = block_sum(q, shared) / static_cast<double>(M);
  if (threadIdx.x == 0) mean[c] = static_cast<float>(m), var[c] = static_cast<float>(v);
}

__global__ void forward_with_stats_kernel(float* out, float* save_mean, float* save_invstd, const float* in,
                                          const float* gamma, const float* beta, float* running_mean,
                                          float* running_var, const float* mean, const float* var, int64_t count,
                                          int64_t N, int64_t C, int64_t HW, float momentum, float eps) {
  const int64_t c = blockIdx.x, M = N * HW;
  const float invstd = static_cast<float>(1.0 / sqrt(static_cast<double>(var[c]) + eps));
  const float scale = gamma[c] * invstd, shift = beta[c] - mean[c] * scale;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const int64_t k = ((i / HW) * C + c) * HW + i % HW;
    out[k] = in[k] * scale + shift;
  }
  if (threadIdx.x == 0) {
    save_mean[c] = mean[c];
    save_invstd[c] = invstd;
    if (running_mean) {
      const double unbiased = count > 1 ? static_cast<double>(var[c]) * count / (count - 1) : var[c];
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
}

__global__ void backward_reduce_kernel(float* sum_dy, float* sum_dy_xhat, const float* dout, const float* in,
                                       const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                                       int64_t HW) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x, M = N * HW;
  const float mean = save_mean[c];
  double a = 0, b = 0;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const float dy = at(dout, i, c, C, HW);
    a += dy;
    b += dy * (at(in, i, c, C, HW) - mean);
  }
  const double sa = block_sum(a, shared), sb = block_sum(b, shared);
  if (threadIdx.x == 0) sum_dy[c] = static_cast<float>(sa), sum_dy_xhat[c] = static_cast<float>(sb * save_invstd[c]);
}

__global__ void backward_apply_kernel(float* din, const float* dout, const float* in, const float* gamma,
                                      const float* save_mean, const float* save_invstd, const float* sum_dy,
                                      const float* sum_dy_xhat, int64_t count, int64_t N, int64_t C, int64_t HW) {
  const int64_t c = blockIdx.x, M = N * HW;
  const float mean = save_mean[c], invstd = save_invstd[c], k = gamma[c] * invstd;
  const float mean_dy = static_cast<float>(static_cast<double>(sum_dy[c]) / static_cast<double>(count));
  const float proj = static_cast<float>(static_cast<double>(sum_dy_xhat[c]) / static_cast<double>(count)) * invstd;
  for (int64_t i = threadIdx.x; i < M; i += kThreads) {
    const int64_t j = ((i / HW) * C + c) * HW + i % HW;
    din[j] = k * (dout[j] - mean_dy - (in[j] - mean) * proj);
  }
}

}  // namespace

void batchnorm_stats(Context& c, float* mean, float* var, const float* in, int64_t N, int64_t C, int64_t HW) {
  if (C == 0) return;
  stats_kernel<<<static_cast<unsigned>(C), kThreads, 0, c.handles().stream>>>(mean, var, in, N, C, HW);
  DP_CUDA_CHECK_LAUNCH();
}

void batchnorm_forward_with_stats(Context& c, float* out, float* save_mean, float* save_invstd, const float* in,
                                  const float* gamma, const float* beta, float* running_mean, float* running_var,
                                  const float* mean, const float* var, int64_t count, int64_t N, int64_t C,
                                  int64_t HW, float momentum, float eps) {
  if (C == 0) return;
  forward_with_stats_kernel<<<static_cast<unsigned>(C), kThreads, 0, c.handles().stream>>>(
      out, save_mean, save_invstd, in, gamma, beta, running_mean, running_var, mean, var, count, N, C, HW, momentum,
      eps);
  DP_CUDA_CHECK_LAUNCH();
}

void batchnorm_backward_reduce(Context& c, float* sum_dy, float* sum_dy_xhat, const float* dout, const float* in,
                               const float* save_mean, const float* save_invstd, int64_t N, int64_t C, int64_t HW) {
  if (C == 0) return;
  backward_reduce_kernel<<<static_cast<unsigned>(C), kThreads, 0, c.handles().stream>>>(
      sum_dy, sum_dy_xhat, dout, in, save_mean, save_invstd, N, C, HW);
  DP_CUDA_CHECK_LAUNCH();
}

void batchnorm_backward_apply(Context& c, float* din, const float* dout, const float* in, const float* gamma,
                              const float* save_mean, const float* save_invstd, const float* sum_dy,
                              const float* sum_dy_xhat, int64_t count, int64_t N, int64_t C, int64_t HW) {
  if (C == 0) return;
  backward_apply_kernel<<<static_cast<unsigned>(C), kThreads, 0, c.handles().stream>>>(
      din, dout, in, gamma, save_mean, save_invstd, sum_dy, sum_dy_xhat, count, N, C, HW);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
