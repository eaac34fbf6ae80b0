// BatchNorm2d on CUDA, training and evaluation, plain and SyncBatchNorm's pieces (--sync-bn): the
// per-channel sums split over many blocks (channel_sums.cuh), a per-channel kernel that turns them
// into statistics, then an element-wise pass. cuDNN's spatial batch norm ran at a tenth of the
// memory's bandwidth at convnet's batch 1024 (1.9 ms of a 5.1 ms step on an H100). The formulas are
// the CPU reference's (kernels/cpu/batchnorm.cpp), sums in double; eps is taken as given (cuDNN
// raised it to 1e-5).
#include <math_constants.h>

#include <cmath>

#include "core/cuda/check.cuh"
#include "kernels/cuda/channel_sums.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/unrolled.cuh"
#include "kernels/ops/batchnorm.hpp"

namespace dp::cuda {

namespace {

namespace cs = channel_sums;

// Σ(x − shift) and Σ(x − shift)² per channel, shifted by the channel's first value: the variance
// from one pass without the cancellation of Σx² − (Σx)²/M when the mean is large against the spread.
struct StatsTerm {
  const float* in;
  int64_t HW;
  struct Channel {
    const float* in;
    float shift;
    __device__ float load(int64_t j) const { return in[j] - shift; }
    __device__ void add(double* acc, float d) const {
      acc[0] += d;
      acc[1] += static_cast<double>(d) * d;
    }
  };
  __device__ Channel channel(int64_t c) const { return {in, in[c * HW]}; }
};

// Σdy and Σdy·(x − mean) per channel (mean: the saved one).
struct GradTerm {
  const float *dout, *in, *save_mean;
  struct Value {
    float dy, x;
  };
  struct Channel {
    const float *dout, *in;
    float mean;
    __device__ Value load(int64_t j) const { return {dout[j], in[j]}; }
    __device__ void add(double* acc, Value v) const {
      acc[0] += v.dy;
      acc[1] += v.dy * (v.x - mean);
    }
  };
  __device__ Channel channel(int64_t c) const { return {dout, in, save_mean[c]}; }
};

// This chunk's mean and biased variance per channel.
__device__ void mean_and_var(const double* partials, const float* in, int64_t C, int64_t S, int64_t HW, int64_t M,
                             int64_t c, double& mean, double& var) {
  if (M == 0) {  // the CPU reference's 0/0, without reading the empty input
    mean = var = CUDART_NAN;
    return;
  }
  const double shift = in[c * HW], d = cs::part_total(partials, C, S, 0, c) / static_cast<double>(M);
  mean = shift + d;
  var = fmax(cs::part_total(partials, C, S, 1, c) / static_cast<double>(M) - d * d, 0.0);
}

// Saves mean and 1/std for backward and moves the running estimates (unbiased variance).
__device__ void save_and_run(float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                             double mean, double var, int64_t count, float momentum, float eps, int64_t c) {
  save_mean[c] = static_cast<float>(mean);
  save_invstd[c] = static_cast<float>(1.0 / sqrt(var + eps));
  if (!running_mean) return;
  const double unbiased = count > 1 ? var * count / (count - 1) : var;
  running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

__global__ void train_stats_kernel(float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                                   const double* partials, const float* in, int64_t C, int64_t S, int64_t HW,
                                   int64_t M, float momentum, float eps) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  double mean, var;
  mean_and_var(partials, in, C, S, HW, M, c, mean, var);
  save_and_run(save_mean, save_invstd, running_mean, running_var, mean, var, M, momentum, eps, c);
}

__global__ void chunk_stats_kernel(float* mean_out, float* var_out, const double* partials, const float* in,
                                   int64_t C, int64_t S, int64_t HW, int64_t M) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  double mean, var;
  mean_and_var(partials, in, C, S, HW, M, c, mean, var);
  mean_out[c] = static_cast<float>(mean), var_out[c] = static_cast<float>(var);
}

__global__ void given_stats_kernel(float* save_mean, float* save_invstd, float* running_mean, float* running_var,
                                   const float* mean, const float* var, int64_t C, int64_t count, float momentum,
                                   float eps) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c < C) save_and_run(save_mean, save_invstd, running_mean, running_var, mean[c], var[c], count, momentum, eps, c);
}

// The backward's per-channel coefficients: dx = k·(dy − mean_dy − (x − mean)·proj).
struct DxCoefficients {
  float *k, *mean_dy, *proj;
};
__device__ void dx_coefficients(DxCoefficients out, const float* gamma, const float* save_invstd, double sum_dy,
                                double sum_dy_xhat, int64_t count, int64_t c) {
  const float invstd = save_invstd[c];
  out.k[c] = gamma[c] * invstd;
  out.mean_dy[c] = static_cast<float>(sum_dy / static_cast<double>(count));
  out.proj[c] = static_cast<float>(sum_dy_xhat / static_cast<double>(count)) * invstd;
}

// Plain backward: dgamma, dbeta and (when dx is wanted) the coefficients, from this chunk's sums.
__global__ void grad_sums_kernel(float* dgamma, float* dbeta, DxCoefficients coef, const double* partials,
                                 const float* gamma, const float* save_invstd, int64_t C, int64_t S, int64_t count) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  const double sum_dy = cs::part_total(partials, C, S, 0, c);
  const double sum_dy_xhat = cs::part_total(partials, C, S, 1, c) * save_invstd[c];
  dgamma[c] = static_cast<float>(sum_dy_xhat);
  dbeta[c] = static_cast<float>(sum_dy);
  if (coef.k) dx_coefficients(coef, gamma, save_invstd, sum_dy, sum_dy_xhat, count, c);
}

__global__ void chunk_grad_sums_kernel(float* sum_dy, float* sum_dy_xhat, const double* partials,
                                       const float* save_invstd, int64_t C, int64_t S) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  sum_dy[c] = static_cast<float>(cs::part_total(partials, C, S, 0, c));
  sum_dy_xhat[c] = static_cast<float>(cs::part_total(partials, C, S, 1, c) * save_invstd[c]);
}

__global__ void given_grad_sums_kernel(DxCoefficients coef, const float* gamma, const float* save_invstd,
                                       const float* sum_dy, const float* sum_dy_xhat, int64_t C, int64_t count) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c < C) dx_coefficients(coef, gamma, save_invstd, sum_dy[c], sum_dy_xhat[c], count, c);
}

// out = x·scale + shift, per channel: training's from gamma, beta and the batch's statistics (saved
// mean and 1/std), evaluation's from the running estimates.
struct BatchScale {
  const float *gamma, *beta, *mean, *invstd;
  __device__ void operator()(int64_t c, float& scale, float& shift) const {
    scale = gamma[c] * invstd[c];
    shift = beta[c] - mean[c] * scale;
  }
};
struct RunningScale {
  const float *gamma, *beta, *running_mean, *running_var;
  float eps;
  __device__ void operator()(int64_t c, float& scale, float& shift) const {
    scale = gamma[c] / sqrtf(running_var[c] + eps);
    shift = beta[c] - running_mean[c] * scale;
  }
};

// Element-wise passes over [N, C, HW] (unrolled.cuh); element i is in channel i / HW % C.
template <typename I, typename Scale>
__global__ void normalize_kernel(float* out, const float* in, Scale scale_of, I n, I HW, I C) {
  unrolled_map<I, 1>(out, {in}, n, [&](const float(&x)[1], I i) {
    float scale, shift;
    scale_of(i / HW % C, scale, shift);
    return x[0] * scale + shift;
  });
}

template <typename I>
__global__ void dx_kernel(float* din, const float* dout, const float* in, const float* mean, DxCoefficients coef,
                          I n, I HW, I C) {
  unrolled_map<I, 2>(din, {dout, in}, n, [&](const float(&v)[2], I i) {
    const I c = i / HW % C;
    return coef.k[c] * (v[0] - coef.mean_dy[c] - (v[1] - mean[c]) * coef.proj[c]);
  });
}

template <typename Scale>
void normalize(Context& c, float* out, const float* in, const Scale& scale, int64_t N, int64_t C, int64_t HW) {
  const int64_t n = N * C * HW;
  with_index_type(n, [&](auto tag) {
    using I = decltype(tag);
    normalize_kernel<I><<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(out, in, scale, n, HW, C);
    DP_CUDA_CHECK_LAUNCH();
  }, kUnroll);
}

// Scratch for the dx coefficients, three floats a channel.
class Coefficients {
 public:
  Coefficients(ScratchMemory& alloc, int64_t C) : C_(C), block_(alloc, static_cast<size_t>(3 * C) * sizeof(float)) {}
  DxCoefficients get() const {
    float* p = block_.at<float>();
    return {p, p + C_, p + 2 * C_};
  }

 private:
  int64_t C_;
  ScopedBlock block_;
};

void dx(Context& c, float* din, const float* dout, const float* in, const float* mean, DxCoefficients coef, int64_t N,
        int64_t C, int64_t HW) {
  const int64_t n = N * C * HW;
  with_index_type(n, [&](auto tag) {
    using I = decltype(tag);
    dx_kernel<I><<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(din, dout, in, mean, coef, n, HW, C);
    DP_CUDA_CHECK_LAUNCH();
  }, kUnroll);
}

}  // namespace

void batchnorm_forward_train(Context& c, ScratchMemory& alloc, float* out, float* save_mean, float* save_invstd,
                             const float* in, const float* gamma, const float* beta, float* running_mean,
                             float* running_var, int64_t N, int64_t C, int64_t HW, float momentum, float eps) {
  if (N * C * HW == 0) return;
  auto stream = c.handles().stream;
  cs::Partials<2> sums(alloc, N, C, HW);
  sums.compute(stream, StatsTerm{in, HW});
  train_stats_kernel<<<cs::finish_blocks(C), kThreads, 0, stream>>>(
      save_mean, save_invstd, running_mean, running_var, sums.ptr(), in, C, sums.parts(), HW, N * HW, momentum, eps);
  DP_CUDA_CHECK_LAUNCH();
  normalize(c, out, in, BatchScale{gamma, beta, save_mean, save_invstd}, N, C, HW);
}

void batchnorm_forward_eval(Context& c, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps) {
  if (N * C * HW == 0) return;
  normalize(c, out, in, RunningScale{gamma, beta, running_mean, running_var, eps}, N, C, HW);
}

void batchnorm_backward(Context& c, ScratchMemory& alloc, float* din, float* dgamma, float* dbeta,
                        const float* dout, const float* in, const float* gamma, const float* save_mean,
                        const float* save_invstd, int64_t N, int64_t C, int64_t HW, float) {
  if (N * C * HW == 0) return;
  auto stream = c.handles().stream;
  cs::Partials<2> sums(alloc, N, C, HW);
  sums.compute(stream, GradTerm{dout, in, save_mean});
  Coefficients coef(alloc, din ? C : 0);
  grad_sums_kernel<<<cs::finish_blocks(C), kThreads, 0, stream>>>(
      dgamma, dbeta, din ? coef.get() : DxCoefficients{}, sums.ptr(), gamma, save_invstd, C, sums.parts(), N * HW);
  DP_CUDA_CHECK_LAUNCH();
  if (din) dx(c, din, dout, in, save_mean, coef.get(), N, C, HW);
}

void batchnorm_stats(Context& c, ScratchMemory& alloc, float* mean, float* var, const float* in, int64_t N,
                     int64_t C, int64_t HW) {
  if (C == 0) return;
  auto stream = c.handles().stream;
  cs::Partials<2> sums(alloc, N, C, HW);
  sums.compute(stream, StatsTerm{in, HW});
  chunk_stats_kernel<<<cs::finish_blocks(C), kThreads, 0, stream>>>(mean, var, sums.ptr(), in, C, sums.parts(), HW,
                                                                     N * HW);
  DP_CUDA_CHECK_LAUNCH();
}

void batchnorm_forward_with_stats(Context& c, float* out, float* save_mean, float* save_invstd, const float* in,
                                  const float* gamma, const float* beta, float* running_mean, float* running_var,
                                  const float* mean, const float* var, int64_t count, int64_t N, int64_t C,
                                  int64_t HW, float momentum, float eps) {
  if (C == 0) return;
  given_stats_kernel<<<cs::finish_blocks(C), kThreads, 0, c.handles().stream>>>(
      save_mean, save_invstd, running_mean, running_var, mean, var, C, count, momentum, eps);
  DP_CUDA_CHECK_LAUNCH();
  if (N * HW > 0) normalize(c, out, in, BatchScale{gamma, beta, save_mean, save_invstd}, N, C, HW);
}

void batchnorm_backward_reduce(Context& c, ScratchMemory& alloc, float* sum_dy, float* sum_dy_xhat,
                               const float* dout, const float* in, const float* save_mean, const float* save_invstd,
                               int64_t N, int64_t C, int64_t HW) {
  if (C == 0) return;
  auto stream = c.handles().stream;
  cs::Partials<2> sums(alloc, N, C, HW);
  sums.compute(stream, GradTerm{dout, in, save_mean});
  chunk_grad_sums_kernel<<<cs::finish_blocks(C), kThreads, 0, stream>>>(sum_dy, sum_dy_xhat, sums.ptr(),
                                                                         save_invstd, C, sums.parts());
  DP_CUDA_CHECK_LAUNCH();
}

void batchnorm_backward_apply(Context& c, ScratchMemory& alloc, float* din, const float* dout, const float* in,
                              const float* gamma, const float* save_mean, const float* save_invstd,
                              const float* sum_dy, const float* sum_dy_xhat, int64_t count, int64_t N, int64_t C,
                              int64_t HW) {
  if (N * C * HW == 0) return;
  Coefficients coef(alloc, C);
  given_grad_sums_kernel<<<cs::finish_blocks(C), kThreads, 0, c.handles().stream>>>(
      coef.get(), gamma, save_invstd, sum_dy, sum_dy_xhat, C, count);
  DP_CUDA_CHECK_LAUNCH();
  dx(c, din, dout, in, save_mean, coef.get(), N, C, HW);
}

}  // namespace dp::cuda
