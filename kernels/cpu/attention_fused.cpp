// Fused attention's CPU reference (kernels/ops/attention_fused.hpp): per (b, h), in parallel over
// the B·H pairs, the head's scores in a [T, T] buffer of the thread's own (the op keeps none of
// them), q, k and v strided views of qkv as in attention.cpp. Forward as the explicit attention's
// plus each row's log-sum-exp; backward recomputes the probabilities from it.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/attention_rows.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/ops/attention_fused.hpp"

namespace dp::cpu {

namespace {

int i32(int64_t v) { return static_cast<int>(v); }

// a [T, T] = scale · x·yᵀ of two heads' [T, hs] views (leading dimension ld)
void head_products(float* a, const float* x, const float* y, int64_t T, int64_t hs, int64_t ld, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i32(T), i32(T), i32(hs), scale, x, i32(ld), y, i32(ld), 0.f, a,
              i32(T));
}

}  // namespace

void attention_fused_forward(ThreadPool& pool, float* out, float* lse, const float* qkv, const AttentionShape& s) {
  const int64_t T = s.T, C = s.C, H = s.H, hs = s.hs(), ld = 3 * C;
  const float scale = s.score_scale();
  pool.parallel_for(s.B * H, [=, &s](int64_t p0, int64_t p1) {
    std::vector<float> att(static_cast<size_t>(T * T));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / H, h = p % H;
      const float* q = qkv + b * T * ld + h * hs;
      float* a = att.data();
      head_products(a, q, q + C, T, hs, ld, scale);
      for (int64_t t = 0; t < T; ++t) lse[p * T + t] = softmax_row(a + t * T, s.last_key(t), T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i32(T), i32(hs), i32(T), 1.f, a, i32(T), q + 2 * C, i32(ld),
                  0.f, out + b * T * C + h * hs, i32(C));
    }
  });
}

void attention_fused_backward(ThreadPool& pool, float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, const AttentionShape& s) {
  const int64_t T = s.T, C = s.C, H = s.H, hs = s.hs(), ld = 3 * C;
  const float scale = s.score_scale();
  pool.parallel_for(s.B * H, [=, &s](int64_t p0, int64_t p1) {
    std::vector<float> prob(static_cast<size_t>(T * T)), dscore(static_cast<size_t>(T * T));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / H, h = p % H;
      const float* q = qkv + b * T * ld + h * hs;
      const float *k = q + C, *v = q + 2 * C;
      const float* dy = dout + b * T * C + h * hs;
      const float* y = out + b * T * C + h * hs;
      float* dq = dqkv + b * T * ld + h * hs;
      float *dk = dq + C, *dv = dq + 2 * C;
      // p = exp(scale·q·kᵀ − lse) where the query sees the key; dp = dy·vᵀ
      head_products(prob.data(), q, k, T, hs, ld, scale);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i32(T), i32(T), i32(hs), 1.f, dy, i32(C), v, i32(ld), 0.f,
                  dscore.data(), i32(T));
      for (int64_t t = 0; t < T; ++t) {
        float* pr = prob.data() + t * T;
        float* d = dscore.data() + t * T;
        const int64_t last = s.last_key(t);
        const float l = lse[p * T + t];
        double dot = 0;  // Σ_j p_j·dp_j, which is dy·y: the output's row
        for (int64_t c = 0; c < hs; ++c) dot += double(dy[t * C + c]) * y[t * C + c];
        for (int64_t j = 0; j < T; ++j) {
          const float pj = j <= last ? fast_exp(pr[j] - l) : 0.f;
          pr[j] = pj;
          d[j] = j <= last ? static_cast<float>(pj * (d[j] - dot)) * scale : 0.f;
        }
      }
      // dv = pᵀ·dy ; dq = dscore·k ; dk = dscoreᵀ·q
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i32(T), i32(hs), i32(T), 1.f, prob.data(), i32(T), dy, i32(C),
                  0.f, dv, i32(ld));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i32(T), i32(hs), i32(T), 1.f, dscore.data(), i32(T), k,
                  i32(ld), 0.f, dq, i32(ld));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i32(T), i32(hs), i32(T), 1.f, dscore.data(), i32(T), q,
                  i32(ld), 0.f, dk, i32(ld));
    }
  });
}

}  // namespace dp::cpu
