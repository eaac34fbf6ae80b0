#include "core/thread_pool.hpp"
#include "kernels/ops/adamw.hpp"

#include <cmath>

namespace dp::cpu {

void adamw_update(ThreadPool& pool, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                  const AdamWStep& s, int64_t n, const int32_t* skip_if) {
  if (skip_if && *skip_if) return;
  const float decay = 1.f - s.lr.get() * s.weight_decay, b1 = s.beta1, b2 = s.beta2, a1 = 1.f - s.beta1,
              a2 = 1.f - s.beta2, step = s.step_size.get(), bc2 = s.bc2_sqrt.get(), eps = s.eps;
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    float* __restrict p = param;
    const float* __restrict g = grad;
    float* __restrict m = exp_avg;
    float* __restrict v = exp_avg_sq;
    for (int64_t i = a; i < b; ++i) {
      p[i] *= decay;
      m[i] = m[i] * b1 + a1 * g[i];
      v[i] = v[i] * b2 + a2 * (g[i] * g[i]);
      p[i] -= step * (m[i] / (std::sqrt(v[i]) / bc2 + eps));
    }
  });
}

}  // namespace dp::cpu
