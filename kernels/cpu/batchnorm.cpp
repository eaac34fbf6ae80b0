// BatchNorm2d with PyTorch's semantics: biased variance to normalise, unbiased variance for
// the running estimate, running = (1 - momentum)·running + momentum·batch. Channels are split
// across the device's threads. Each (sample, channel) plane is summed in float (vectorised),
// and the planes' sums are accumulated in double.
#include <cmath>

#include "kernels/ops/batchnorm.hpp"
#include "core/thread_pool.hpp"

namespace dp::cpu {

namespace {

inline float plane_sum(const float* __restrict x, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

inline float plane_sq_dev(const float* __restrict x, float mean, int64_t n) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

inline void scale_shift(float* __restrict y, const float* __restrict x, float scale, float shift, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale + shift;
}

// Channel c's Σdy and Σdy·(x − mean) over this chunk.
void channel_dy_sums(const float* dout, const float* in, int64_t N, int64_t C, int64_t HW, int64_t c, float mean,
                     double& sum_dy, double& sum_dy_xc) {
  sum_dy = 0, sum_dy_xc = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict x = in + (n * C + c) * HW;
    const float* __restrict dy = dout + (n * C + c) * HW;
    float a = 0.f, b = 0.f;
#pragma omp simd reduction(+ : a, b)
    for (int64_t i = 0; i < HW; ++i) {
      a += dy[i];
      b += dy[i] * (x[i] - mean);
    }
    sum_dy += a;
    sum_dy_xc += b;
  }
}

// Channel c's input gradient from its sums over `count` values:
// dx = γ·invstd · (dy − Σdy/count − x̂·Σ(dy·x̂)/count), with x̂ = (x − mean)·invstd.
void channel_dx(float* din, const float* dout, const float* in, int64_t N, int64_t C, int64_t HW, int64_t c,
                float gamma, float mean, float invstd, double sum_dy, double sum_dy_xhat, int64_t count) {
  const float k = gamma * invstd;
  const float mean_dy = static_cast<float>(sum_dy / static_cast<double>(count));
  const float proj = static_cast<float>(sum_dy_xhat / static_cast<double>(count)) * invstd;  // per unit (x − mean)
  for (int64_t n = 0; n < N; ++n) {
    const float* __restrict x = in + (n * C + c) * HW;
    const float* __restrict dy = dout + (n * C + c) * HW;
    float* __restrict dx = din + (n * C + c) * HW;
    for (int64_t i = 0; i < HW; ++i) dx[i] = k * (dy[i] - mean_dy - (x[i] - mean) * proj);
  }
}

}  // namespace

void batchnorm_forward_train(ThreadPool& pool, float* out, float* save_mean, float* save_invstd, const float* in,
                             const float* gamma, const float* beta, float* running_mean, float* running_var,
                             int64_t N, int64_t C, int64_t HW, float momentum, float eps) {
  const int64_t M = N * HW;
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n) sum += plane_sum(in + (n * C + c) * HW, HW);
      const double mean = sum / static_cast<double>(M);
      for (int64_t n = 0; n < N; ++n) sq += plane_sq_dev(in + (n * C + c) * HW, static_cast<float>(mean), HW);
      const double var = sq / static_cast<double>(M);
      const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
      save_mean[c] = static_cast<float>(mean);
      save_invstd[c] = invstd;
      const float scale = gamma[c] * invstd, shift = beta[c] - static_cast<float>(mean) * scale;
      for (int64_t n = 0; n < N; ++n) scale_shift(out + (n * C + c) * HW, in + (n * C + c) * HW, scale, shift, HW);
      if (running_mean) {
        const double unbiased = M > 1 ? sq / static_cast<double>(M - 1) : var;
        running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
        running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
      }
    }
  });
}

void batchnorm_forward_eval(ThreadPool& pool, float* out, const float* in, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, int64_t N, int64_t C, int64_t HW,
                            float eps) {
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float scale = gamma[c] / std::sqrt(running_var[c] + eps);
      const float shift = beta[c] - running_mean[c] * scale;
      for (int64_t n = 0; n < N; ++n) scale_shift(out + (n * C + c) * HW, in + (n * C + c) * HW, scale, shift, HW);
    }
  });
}

void batchnorm_backward(ThreadPool& pool, float* din, float* dgamma, float* dbeta, const float* dout,
                        const float* in, const float* gamma, const float* save_mean, const float* save_invstd,
                        int64_t N, int64_t C, int64_t HW, float) {
  const int64_t M = N * HW;
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float mean = save_mean[c], invstd = save_invstd[c];
      double sum_dy, sum_dy_xc;  // Σdy and Σdy·(x − mean)
      channel_dy_sums(dout, in, N, C, HW, c, mean, sum_dy, sum_dy_xc);
      const double sum_dy_xhat = sum_dy_xc * invstd;
      dgamma[c] = static_cast<float>(sum_dy_xhat);
      dbeta[c] = static_cast<float>(sum_dy);
      if (din) channel_dx(din, dout, in, N, C, HW, c, gamma[c], mean, invstd, sum_dy, sum_dy_xhat, M);
    }
  });
}

void batchnorm_stats(ThreadPool& pool, float* mean, float* var, const float* in, int64_t N, int64_t C, int64_t HW) {
  const auto M = static_cast<double>(N * HW);
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n) sum += plane_sum(in + (n * C + c) * HW, HW);
      const double m = sum / M;
      for (int64_t n = 0; n < N; ++n) sq += plane_sq_dev(in + (n * C + c) * HW, static_cast<float>(m), HW);
      mean[c] = static_cast<float>(m);
      var[c] = static_cast<float>(sq / M);
    }
  });
}

void batchnorm_forward_with_stats(ThreadPool& pool, float* out, float* save_mean, float* save_invstd, const float* in,
                                  const float* gamma, const float* beta, float* running_mean, float* running_var,
                                  const float* mean, const float* var, int64_t count, int64_t N, int64_t C,
                                  int64_t HW, float momentum, float eps) {
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float invstd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + eps));
      save_mean[c] = mean[c];
      save_invstd[c] = invstd;
      const float scale = gamma[c] * invstd, shift = beta[c] - mean[c] * scale;
      for (int64_t n = 0; n < N; ++n) scale_shift(out + (n * C + c) * HW, in + (n * C + c) * HW, scale, shift, HW);
      if (running_mean) {
        const double unbiased = count > 1 ? static_cast<double>(var[c]) * count / (count - 1) : var[c];
        running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
        running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
      }
    }
  });
}

void batchnorm_backward_reduce(ThreadPool& pool, float* sum_dy, float* sum_dy_xhat, const float* dout,
                               const float* in, const float* save_mean, const float* save_invstd, int64_t N, int64_t C,
                               int64_t HW) {
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double a, b;
      channel_dy_sums(dout, in, N, C, HW, c, save_mean[c], a, b);
      sum_dy[c] = static_cast<float>(a);
      sum_dy_xhat[c] = static_cast<float>(b * save_invstd[c]);
    }
  });
}

void batchnorm_backward_apply(ThreadPool& pool, float* din, const float* dout, const float* in, const float* gamma,
                              const float* save_mean, const float* save_invstd, const float* sum_dy,
                              const float* sum_dy_xhat, int64_t count, int64_t N, int64_t C, int64_t HW) {
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      channel_dx(din, dout, in, N, C, HW, c, gamma[c], save_mean[c], save_invstd[c], sum_dy[c], sum_dy_xhat[c], count);
  });
}

}  // namespace dp::cpu
