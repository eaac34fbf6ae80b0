#include "kernels/ops/sgd.hpp"
#include "core/thread_pool.hpp"

namespace dp::cpu {

void sgd_update(ThreadPool& pool, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdStep& s, int64_t n, const int32_t* skip_if) {
  if (skip_if && *skip_if) return;  // on a host device, device memory is this process's
  // Settings copied to locals and pointers marked restrict, so each loop vectorises.
  const float lr = s.lr.get(), mu = s.momentum, damp = 1.f - s.dampening, wd = s.weight_decay;
  const bool nesterov = s.nesterov;
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    float* __restrict p = param;
    const float* __restrict g = grad;
    float* __restrict buf = momentum_buf;
    if (mu == 0.f) {
      for (int64_t i = a; i < b; ++i) p[i] -= lr * (g[i] + wd * p[i]);
      return;
    }
    for (int64_t i = a; i < b; ++i) {
      const float d = g[i] + wd * p[i];
      const float m = first_step ? d : mu * buf[i] + damp * d;
      buf[i] = m;
      p[i] -= lr * (nesterov ? d + mu * m : m);
    }
  });
}

}  // namespace dp::cpu
