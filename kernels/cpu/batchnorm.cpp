// BatchNorm2d with PyTorch's semantics: biased variance to normalise, unbiased variance for
// the running estimate, running = (1 - momentum)·running + momentum·batch. Channels are split
// across the device's threads; sums are accumulated in double for stability.
#include <cmath>

#include "kernels/cpu/kernels.hpp"

namespace dp::cpu {

void batchnorm_forward_train(ThreadPool& pool, float* out, float* save_mean, float* save_invstd, const float* in,
                             const float* gamma, const float* beta, float* running_mean, float* running_var,
                             int64_t N, int64_t C, int64_t HW, float momentum, float eps) {
  const int64_t M = N * HW;
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0, sq = 0;
      for (int64_t n = 0; n < N; ++n) {
        const float* x = in + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) sum += x[i];
      }
      const double mean = sum / static_cast<double>(M);
      for (int64_t n = 0; n < N; ++n) {
        const float* x = in + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) sq += (x[i] - mean) * (x[i] - mean);
      }
      const double var = sq / static_cast<double>(M);
      const float invstd = static_cast<float>(1.0 / std::sqrt(var + eps));
      save_mean[c] = static_cast<float>(mean);
      save_invstd[c] = invstd;
      const float scale = gamma[c] * invstd, shift = beta[c] - static_cast<float>(mean) * scale;
      for (int64_t n = 0; n < N; ++n) {
        const float* x = in + (n * C + c) * HW;
        float* y = out + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) y[i] = x[i] * scale + shift;
      }
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
      for (int64_t n = 0; n < N; ++n) {
        const float* x = in + (n * C + c) * HW;
        float* y = out + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) y[i] = x[i] * scale + shift;
      }
    }
  });
}

void batchnorm_backward(ThreadPool& pool, float* din, float* dgamma, float* dbeta, const float* dout,
                        const float* in, const float* gamma, const float* save_mean, const float* save_invstd,
                        int64_t N, int64_t C, int64_t HW) {
  const int64_t M = N * HW;
  pool.parallel_for(C, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float mean = save_mean[c], invstd = save_invstd[c];
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < N; ++n) {
        const float* x = in + (n * C + c) * HW;
        const float* dy = dout + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) {
          sum_dy += dy[i];
          sum_dy_xhat += dy[i] * (x[i] - mean) * invstd;
        }
      }
      dgamma[c] = static_cast<float>(sum_dy_xhat);
      dbeta[c] = static_cast<float>(sum_dy);
      if (!din) continue;
      // dx = γ·invstd/M · (M·dy − Σdy − x̂·Σ(dy·x̂))
      const float k = gamma[c] * invstd / static_cast<float>(M);
      const float a = static_cast<float>(sum_dy), bcoef = static_cast<float>(sum_dy_xhat);
      for (int64_t n = 0; n < N; ++n) {
        const float* x = in + (n * C + c) * HW;
        const float* dy = dout + (n * C + c) * HW;
        float* dx = din + (n * C + c) * HW;
        for (int64_t i = 0; i < HW; ++i) {
          const float xhat = (x[i] - mean) * invstd;
          dx[i] = k * (static_cast<float>(M) * dy[i] - a - xhat * bcoef);
        }
      }
    }
  });
}

}  // namespace dp::cpu
