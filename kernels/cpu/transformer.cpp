#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/ops/transformer.hpp"

namespace dp::cpu {

namespace {
constexpr double kInvSqrt2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;

void check_ids(const int32_t* ids, int64_t rows, int64_t V) {
  for (int64_t r = 0; r < rows; ++r)
    if (ids[r] < 0 || ids[r] >= V)
      throw RuntimeError("token id " + std::to_string(ids[r]) + " at position " + std::to_string(r) +
                         " is outside the vocabulary [0, " + std::to_string(V) + ")");
}
}  // namespace

void layernorm_forward(ThreadPool& pool, float* out, float* mean, float* rstd, const float* in, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps) {
  pool.parallel_for(rows, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = in + r * C;
      double s = 0, sq = 0;
      for (int64_t i = 0; i < C; ++i) s += x[i];
      const double m = s / static_cast<double>(C);
      for (int64_t i = 0; i < C; ++i) sq += (x[i] - m) * (x[i] - m);
      const double rs = 1.0 / std::sqrt(sq / static_cast<double>(C) + eps);
      mean[r] = static_cast<float>(m);
      rstd[r] = static_cast<float>(rs);
      float* y = out + r * C;
      for (int64_t i = 0; i < C; ++i) y[i] = static_cast<float>((x[i] - m) * rs) * gamma[i] + (beta ? beta[i] : 0.f);
    }
  });
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)) with g = dout·γ; dγ = Σ dout·x̂, dβ = Σ dout over rows.
void layernorm_backward(ThreadPool& pool, float* din, float* dgamma, float* dbeta, const float* dout, const float* in,
                        const float* gamma, const float* mean, const float* rstd, int64_t rows, int64_t C) {
  if (din)
    pool.parallel_for(rows, [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float *x = in + r * C, *dy = dout + r * C;
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < C; ++i) {
          const double xhat = (x[i] - mean[r]) * rstd[r], g = double(dy[i]) * gamma[i];
          sg += g;
          sgx += g * xhat;
        }
        sg /= static_cast<double>(C);
        sgx /= static_cast<double>(C);
        for (int64_t i = 0; i < C; ++i) {
          const double xhat = (x[i] - mean[r]) * rstd[r], g = double(dy[i]) * gamma[i];
          din[r * C + i] = static_cast<float>(rstd[r] * (g - sg - xhat * sgx));
        }
      }
    });
  // dγ, dβ: each thread takes a range of columns and walks the rows in order, reading each row's
  // slice contiguously (a column-by-column walk strides by C and misses the cache at B·T rows).
  pool.parallel_for(C, [=](int64_t c0, int64_t c1) {
    std::vector<double> dg(static_cast<size_t>(c1 - c0), 0.0), db(static_cast<size_t>(c1 - c0), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const float *x = in + r * C, *dy = dout + r * C;
      for (int64_t i = c0; i < c1; ++i) {
        dg[static_cast<size_t>(i - c0)] += double(dy[i]) * (x[i] - mean[r]) * rstd[r];
        db[static_cast<size_t>(i - c0)] += dy[i];
      }
    }
    for (int64_t i = c0; i < c1; ++i) {
      dgamma[i] = static_cast<float>(dg[static_cast<size_t>(i - c0)]);
      if (dbeta) dbeta[i] = static_cast<float>(db[static_cast<size_t>(i - c0)]);
    }
  });
}

// Exact GELU, x·Φ(x), with Φ from the vectorised erf (fast_math.hpp): libm's erf per element
// cost more than the GEMMs around it.
void gelu_forward(ThreadPool& pool, float* out, const float* in, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const float x = in[i], u = x * static_cast<float>(kInvSqrt2);
      out[i] = 0.5f * x * (1.f + erf_with(u, fast_exp(-u * u)));
    }
  });
}

// d/dx x·Φ(x) = Φ(x) + x·φ(x); φ and Φ share one exp(−x²/2).
void gelu_backward(ThreadPool& pool, float* din, const float* dout, const float* in, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      const float x = in[i], u = x * static_cast<float>(kInvSqrt2), e = fast_exp(-u * u);
      const float cdf = 0.5f * (1.f + erf_with(u, e)), pdf = static_cast<float>(kInvSqrt2Pi) * e;
      din[i] = dout[i] * (cdf + x * pdf);
    }
  });
}

void embedding_forward(ThreadPool& pool, float* out, const int32_t* ids, const float* table, int64_t rows, int64_t V,
                       int64_t C) {
  check_ids(ids, rows, V);
  pool.parallel_for(rows, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) std::memcpy(out + r * C, table + ids[r] * C, static_cast<size_t>(C) * sizeof(float));
  });
}

// Rows are visited in order for every column range, so repeated ids sum in a fixed order.
void embedding_backward(ThreadPool& pool, float* dtable, const float* dout, const int32_t* ids, int64_t rows, int64_t V,
                        int64_t C) {
  check_ids(ids, rows, V);
  std::memset(dtable, 0, static_cast<size_t>(V * C) * sizeof(float));
  pool.parallel_for(C, [=](int64_t c0, int64_t c1) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = c0; i < c1; ++i) dtable[ids[r] * C + i] += dout[r * C + i];
  });
}

void positions(ThreadPool&, int32_t* ids, int64_t T) {
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>(t);
}

}  // namespace dp::cpu
