// Swin V2's cosine attention's rows (kernels/ops/cosine_attention.hpp): a row at a time.
#include "kernels/ops/cosine_attention.hpp"

#include "core/thread_pool.hpp"

namespace dp::cpu {

void cosine_qk_forward(ThreadPool& pool, float* qkv, float* norms, const float* logit_scale, const CosineShape& s) {
  const int64_t H = s.H, hs = s.hs();
  pool.parallel_for(s.rows() * 2 * H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // r = (b·T + t)·2H + part·H + h
      const int64_t row = r / (2 * H), part = r / H % 2, h = r % H;
      const float scale = part == 0 ? CosineShape::scale_of(logit_scale[h]) : 1.f;
      norms[r] = cosine_row_forward(qkv + row * 3 * s.C + part * s.C + h * hs, hs, scale);
    }
  });
}

void cosine_qk_backward(ThreadPool& pool, float* dqkv, const float* qkv, const float* norms, const float* logit_scale,
                        float* row_dots, const CosineShape& s) {
  const int64_t H = s.H, hs = s.hs();
  pool.parallel_for(s.rows() * 2 * H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = r / (2 * H), part = r / H % 2, h = r % H, at = row * 3 * s.C + part * s.C + h * hs;
      const float scale = part == 0 ? CosineShape::scale_of(logit_scale[h]) : 1.f;
      const float dot = cosine_row_backward(dqkv + at, qkv + at, hs, norms[r], scale);
      if (part == 0) row_dots[row * H + h] = logit_scale[h] <= CosineShape::max_logit() ? dot : 0.f;
    }
  });
}

}  // namespace dp::cpu
