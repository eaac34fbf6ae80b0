#include "kernels/ops/softmax.hpp"

#include <cmath>
#include <limits>

#include "core/thread_pool.hpp"
#include "kernels/cpu/fast_math.hpp"

namespace dp::cpu {

void softmax_forward(ThreadPool& pool, float* out, const float* in, int64_t rows, int64_t n, bool log) {
  pool.parallel_for(rows, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = in + r * n;
      float* y = out + r * n;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, x[j]);
      // exp(−inf) is 0 exactly (fast_exp clamps below −87 to a tiny number instead).
      for (int64_t j = 0; j < n; ++j) y[j] = x[j] == -std::numeric_limits<float>::infinity() ? 0.f : fast_exp(x[j] - mx);
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += y[j];
      if (log) {
        const double lse = static_cast<double>(mx) + std::log(sum);
        for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(static_cast<double>(x[j]) - lse);
      } else {
        const auto inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) y[j] *= inv;
      }
    }
  });
}

void softmax_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t rows, int64_t n,
                      bool log) {
  pool.parallel_for(rows, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* dy = dout + r * n;
      const float* y = out + r * n;
      float* dx = din + r * n;
      double dot = 0;
      if (log) {
        for (int64_t j = 0; j < n; ++j) dot += dy[j];
        for (int64_t j = 0; j < n; ++j) dx[j] = static_cast<float>(dy[j] - std::exp(static_cast<double>(y[j])) * dot);
      } else {
        for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(dy[j]) * y[j];
        for (int64_t j = 0; j < n; ++j) dx[j] = static_cast<float>(y[j] * (dy[j] - dot));
      }
    }
  });
}

void causal_fill(ThreadPool& pool, float* x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  pool.parallel_for(matrices * rows, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % rows;
      for (int64_t j = i + 1; j < cols; ++j) x[r * cols + j] = value;
    }
  });
}

}  // namespace dp::cpu
