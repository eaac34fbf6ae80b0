// Swin V2's cosine attention's rows (kernels/ops/cosine_attention.hpp): a row at a time.
#include "kernels/ops/cosine_attention.hpp"

#include "core/thread_pool.hpp"

namespace dp::cpu {

void cosine_qk_forward(ThreadPool& pool, float* qkv, float* norms, const float* logit_scale, const CosineShape& s) {
  pool.parallel_for(s.rows() * 2 * s.H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) cosine_forward_row(r, qkv, norms, logit_scale, s);
  });
}

void cosine_qk_backward(ThreadPool& pool, float* dqkv, const float* qkv, const float* norms, const float* logit_scale,
                        float* row_dots, const CosineShape& s) {
  pool.parallel_for(s.rows() * 2 * s.H, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) cosine_backward_row(r, dqkv, qkv, norms, logit_scale, row_dots, s);
  });
}

}  // namespace dp::cpu
