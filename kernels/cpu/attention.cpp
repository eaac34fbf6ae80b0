// Attention per (b, h), in parallel over the B·H pairs. q, k, v of one head are strided
// views of qkv (leading dimension 3C), so no copies are made. With dropout, each thread forms the
// dropped probabilities of its head in a buffer of its own (T·T).
#include <cblas.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/cpu/attention_rows.hpp"
#include "kernels/ops/attention.hpp"

namespace dp::cpu {

namespace {

// dst = src ⊙ the dropout factors of head h of sample b ([T, T] of the sample's [H, T, T]).
void drop_head(float* dst, const float* src, int64_t b, int64_t h, int64_t T, const DropoutMask& drop, uint64_t key) {
  const uint64_t state = dropout_sample_state(key, drop.site, drop.sample(b));
  const uint32_t threshold = drop.threshold();
  const float scale = drop.scale();
  for (int64_t e = 0; e < T * T; ++e) dst[e] = src[e] * dropout_factor(state, h * T * T + e, threshold, scale);
}

}  // namespace

void attention_forward(ThreadPool& pool, float* out, float* att, const float* qkv, const AttentionShape& s,
                       const DropoutMask& drop, const float* bias) {
  const int64_t T = s.T, C = s.C, H = s.H, hs = s.hs(), ld = 3 * C;
  const float scale = s.score_scale();
  const uint64_t key = drop.pass_key();
  pool.parallel_for(s.B * H, [=, &drop, &s](int64_t p0, int64_t p1) {
    std::vector<float> dropped(drop.on() ? static_cast<size_t>(T * T) : 0);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / H, h = p % H;
      const float* q = qkv + b * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att + p * T * T;
      // scores = q·kᵀ·scale (the upper triangle is computed and then masked)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(T),
                  static_cast<int>(hs), scale, q, static_cast<int>(ld), k, static_cast<int>(ld), 0.f, a,
                  static_cast<int>(T));
      const float* bias_h = bias ? bias + ((b % s.bias_blocks) * H + h) * T * T : nullptr;
      for (int64_t t = 0; t < T; ++t) {
        float* row = a + t * T;
        const int64_t last = s.last_key(t);
        if (bias_h)
          for (int64_t j = 0; j <= last; ++j) row[j] += bias_h[t * T + j];
        softmax_row(row, last, T);
      }
      const float* weights = a;
      if (drop.on()) drop_head(dropped.data(), a, b, h, T, drop, key), weights = dropped.data();
      // out_h = att·v (att dropped), written into its columns of out [B, T, C]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(T), static_cast<int>(hs),
                  static_cast<int>(T), 1.f, weights, static_cast<int>(T), v, static_cast<int>(ld), 0.f,
                  out + b * T * C + h * hs, static_cast<int>(C));
    }
  });
}

void attention_backward(ThreadPool& pool, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s, const DropoutMask& drop, float* dscores) {
  const int64_t T = s.T, C = s.C, H = s.H, hs = s.hs(), ld = 3 * C;
  const float scale = s.score_scale();
  const uint64_t key = drop.pass_key();
  pool.parallel_for(s.B * H, [=, &drop, &s](int64_t p0, int64_t p1) {
    std::vector<float> dscore(static_cast<size_t>(T * T));
    std::vector<float> dropped(drop.on() ? static_cast<size_t>(T * T) : 0);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / H, h = p % H;
      const float* q = qkv + b * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const float* a = att + p * T * T;
      const float* dy = dout + b * T * C + h * hs;
      float* dq = dqkv + b * T * ld + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      // datt = dy·vᵀ ; dv = attᵀ·dy (att dropped, as forward used it)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(T),
                  static_cast<int>(hs), 1.f, dy, static_cast<int>(C), v, static_cast<int>(ld), 0.f, dscore.data(),
                  static_cast<int>(T));
      const float* weights = a;
      if (drop.on()) {  // the same mask: through it to the probabilities, datt ⊙= f
        drop_head(dropped.data(), a, b, h, T, drop, key), weights = dropped.data();
        drop_head(dscore.data(), dscore.data(), b, h, T, drop, key);
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(T), static_cast<int>(hs),
                  static_cast<int>(T), 1.f, weights, static_cast<int>(T), dy, static_cast<int>(C), 0.f, dv,
                  static_cast<int>(ld));
      // softmax backward per row (masked entries have att 0, so they get 0): the biased scores'
      // gradient (kept when asked for), then the scale
      float* kept = dscores ? dscores + p * T * T : nullptr;
      for (int64_t t = 0; t < T; ++t) {
        float* d = dscore.data() + t * T;
        const float* ar = a + t * T;
        const int64_t last = s.last_key(t);
        double dot = 0;
        for (int64_t j = 0; j <= last; ++j) dot += double(d[j]) * ar[j];
        for (int64_t j = 0; j < T; ++j) {
          const float g = j <= last ? static_cast<float>(ar[j] * (d[j] - dot)) : 0.f;
          if (kept) kept[t * T + j] = g;
          d[j] = g * scale;
        }
      }
      // dq = dscore·k ; dk = dscoreᵀ·q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(T), static_cast<int>(hs),
                  static_cast<int>(T), 1.f, dscore.data(), static_cast<int>(T), k, static_cast<int>(ld), 0.f, dq,
                  static_cast<int>(ld));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(T), static_cast<int>(hs),
                  static_cast<int>(T), 1.f, dscore.data(), static_cast<int>(T), q, static_cast<int>(ld), 0.f, dk,
                  static_cast<int>(ld));
    }
  });
}

}  // namespace dp::cpu
