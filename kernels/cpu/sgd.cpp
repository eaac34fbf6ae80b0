#include "kernels/cpu/kernels.hpp"

namespace dp::cpu {

void sgd_update(ThreadPool& pool, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdConfig& cfg, int64_t n) {
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      float g = grad[i];
      if (cfg.weight_decay != 0.f) g += cfg.weight_decay * param[i];
      if (cfg.momentum != 0.f) {
        float buf = first_step ? g : cfg.momentum * momentum_buf[i] + (1.f - cfg.dampening) * g;
        momentum_buf[i] = buf;
        g = cfg.nesterov ? g + cfg.momentum * buf : buf;
      }
      param[i] -= cfg.lr * g;
    }
  });
}

}  // namespace dp::cpu
