// SGD with torch.optim.SGD's semantics:
//   g = grad + wd·p;  buf = first ? g : momentum·buf + (1 − dampening)·g;
//   g = nesterov ? g + momentum·buf : buf;  p −= lr·g
// momentum_buf is absent when momentum is 0. skip_if (device memory, optional): when it holds a
// non-zero value the update does nothing (fp16's verdict on inf/NaN gradients, made on the device).
// lr_at (device memory, optional): the learning rate, read when the kernel runs — the step's
// per-step value (engine/step/step_scalars.hpp); cfg.lr when absent.
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
                const SgdConfig& cfg, int64_t n, const int32_t* skip_if = nullptr, const float* lr_at = nullptr);
}  // namespace cpu
namespace cuda {
void sgd_update(Context& c, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdConfig& cfg, int64_t n, const int32_t* skip_if = nullptr, const float* lr_at = nullptr);
}  // namespace cuda

inline void sgd_update(const Exec& ex, Buf param, Buf grad, Buf momentum_buf, bool first_step, const SgdConfig& cfg,
                       int64_t n, Buf skip_if = {}, const float* lr_at = nullptr) {
  constexpr const char* op = "sgd_update";
  DP_DISPATCH(ex, sgd_update, param.f32(op), grad.f32(op), momentum_buf.f32(op), first_step, cfg, n,
              skip_if.i32(op), lr_at);
}

}  // namespace dp
