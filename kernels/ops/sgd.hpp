// SGD with torch.optim.SGD's semantics:
//   g = grad + wd·p;  buf = first ? g : momentum·buf + (1 − dampening)·g;
//   g = nesterov ? g + momentum·buf : buf;  p −= lr·g
// momentum_buf is absent when momentum is 0.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

namespace dp {

struct SgdConfig {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};

namespace cpu {
void sgd_update(ThreadPool& pool, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdConfig& cfg, int64_t n);
}  // namespace cpu
namespace cuda {
void sgd_update(Context& c, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdConfig& cfg, int64_t n);
}  // namespace cuda

inline void sgd_update(const Exec& ex, Buf param, Buf grad, Buf momentum_buf, bool first_step, const SgdConfig& cfg,
                       int64_t n) {
  constexpr const char* op = "sgd_update";
  DP_DISPATCH(ex, sgd_update, param.f32(op), grad.f32(op), momentum_buf.f32(op), first_step, cfg, n);
}

}  // namespace dp
