// SGD with torch.optim.SGD's semantics:
//   g = grad + wd·p;  buf = first ? g : momentum·buf + (1 − dampening)·g;
//   g = nesterov ? g + momentum·buf : buf;  p −= lr·g
// momentum_buf is absent when momentum is 0. skip_if (device memory, optional): when it holds a
// non-zero value the update does nothing (fp16's verdict on inf/NaN gradients, made on the device).
// The kernels take an SgdStep: the settings, with the learning rate a value or read from device
// memory when the kernel runs (kernels/scalar_arg.hpp; the step's per-step value,
// engine/optim/step_scalars.hpp), as AdamWStep's.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/scalar_arg.hpp"

namespace dp {

struct SgdConfig {
  float lr = 0.01f, momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
};

struct SgdStep {
  ScalarArg lr;
  float momentum, dampening, weight_decay;
  bool nesterov;
  SgdStep(const SgdConfig& c)  // NOLINT: the settings as they are, lr by value
      : lr(c.lr), momentum(c.momentum), dampening(c.dampening), weight_decay(c.weight_decay), nesterov(c.nesterov) {}
  SgdStep(const SgdConfig& c, ScalarArg learning_rate) : SgdStep(c) { lr = learning_rate; }
};

namespace cpu {
void sgd_update(ThreadPool& pool, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdStep& s, int64_t n, const int32_t* skip_if = nullptr);
}  // namespace cpu
namespace cuda {
void sgd_update(Context& c, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdStep& s, int64_t n, const int32_t* skip_if = nullptr);
}  // namespace cuda

inline void sgd_update(const Exec& ex, Buf param, Buf grad, Buf momentum_buf, bool first_step, const SgdStep& s,
                       int64_t n, Buf skip_if = {}) {
  constexpr const char* op = "sgd_update";
  OpCounter c(ex, op);
  c.updates(param, n), c.reads(grad, n), c.updates(momentum_buf, n), c.reads(skip_if, 1);
  c.flops(5.0 * n);
  DP_DISPATCH(ex, sgd_update, param.f32(op), grad.f32(op), momentum_buf.f32(op), first_step, s, n,
              skip_if.i32(op));
}

}  // namespace dp
