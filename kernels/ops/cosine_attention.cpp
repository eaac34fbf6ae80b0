#include "kernels/ops/cosine_attention.hpp"

#include "kernels/operands.hpp"

namespace dp {

void cosine_qk_forward(const Exec& ex, Buf qkv, Buf norms, Buf logit_scale, const CosineShape& s) {
  constexpr const char* op = "cosine_qk_forward";
  Operands o(ex, op);
  o.flops(4.0 * s.rows() * 2 * s.C), o.cost().writes(norms, 2 * s.rows() * s.H);  // the q and k rows
  float* x = o.inout(qkv, s.rows() * 3 * s.C);
  const float* l = o.in(logit_scale, s.H);
  if (ex.meta) return;
  float* n = norms.f32(op);
#if DP_WITH_CUDA
  if (ex.on_cuda()) {
    cuda::cosine_qk_forward(*ex.cuda, x, n, l, s);
    return o.finish();
  }
#endif
  cpu::cosine_qk_forward(*ex.pool, x, n, l, s);
  o.finish();
}

void cosine_qk_backward(const Exec& ex, Buf dqkv, Buf qkv, Buf norms, Buf logit_scale, Buf row_dots,
                        const CosineShape& s) {
  constexpr const char* op = "cosine_qk_backward";
  Operands o(ex, op);
  o.flops(6.0 * s.rows() * 2 * s.C), o.cost().reads(norms, 2 * s.rows() * s.H);
  o.cost().writes(row_dots, s.rows() * s.H);
  float* dx = o.inout(dqkv, s.rows() * 3 * s.C);
  const float* y = o.in(qkv, s.rows() * 3 * s.C);
  const float* l = o.in(logit_scale, s.H);
  if (ex.meta) return;
  const float* n = norms.f32(op);
  float* dots = row_dots.f32(op);
#if DP_WITH_CUDA
  if (ex.on_cuda()) {
    cuda::cosine_qk_backward(*ex.cuda, dx, y, n, l, dots, s);
    return o.finish();
  }
#endif
  cpu::cosine_qk_backward(*ex.pool, dx, y, n, l, dots, s);
  o.finish();
}

}  // namespace dp
