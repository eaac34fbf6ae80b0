#include "kernels/ops/attention_fused.hpp"

#include <string>

#include "core/error.hpp"
#include "kernels/operands.hpp"

namespace dp {

namespace {
// The (query, key) pairs the kernels compute a score for: the causal triangle, or all of them.
double score_pairs(const AttentionShape& s) {
  const double T = static_cast<double>(s.T), heads = static_cast<double>(s.B * s.H);
  return heads * (s.causal ? T * (T + 1) / 2 : T * T);
}

void check_fused(const Exec& ex, const Operands& o, const char* op, Buf lse, const AttentionShape& s) {
  if (lse.dtype != DType::F32) throw RuntimeError(std::string(op) + ": lse is float32");
  if (s.bias_blocks > 0) throw RuntimeError(std::string(op) + ": the fused kernels take no bias");
  if (ex.on_cuda() && o.native() == DType::F32)
    throw RuntimeError(std::string(op) + ": the fused kernels take 16-bit operands, all of one type");
}
}  // namespace

void attention_fused_forward(const Exec& ex, Buf out, Buf lse, Buf qkv, const AttentionShape& s) {
  constexpr const char* op = "attention_fused_forward";
  Operands o(ex, op, {out, qkv});
  check_fused(ex, o, op, lse, s);
  const int64_t btc = s.B * s.T * s.C, rows = s.B * s.H * s.T;
  // q·kᵀ and p·v over the scores computed, the online softmax
  o.flops(4.0 * score_pairs(s) * static_cast<double>(s.hs()), true), o.flops(5.0 * score_pairs(s));
  o.cost().bytes(4.0 * rows);  // lse (as bytes: the products' type is the operands', not lse's float32)
  float* y = o.out(out, btc);
  const float* x = o.in(qkv, 3 * btc);
  if (ex.meta) return;
  float* l = lse.f32(op);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::attention_fused_forward(*ex.cuda, o.native(), out.ptr, l, qkv.ptr, s);
#endif
  cpu::attention_fused_forward(*ex.pool, y, l, x, s);
  o.finish();
}

void attention_fused_backward(const Exec& ex, Buf dqkv, Buf dout, Buf qkv, Buf out, Buf lse, const AttentionShape& s,
                              [[maybe_unused]] Buf scratch) {
  constexpr const char* op = "attention_fused_backward";
  Operands o(ex, op, {dqkv, dout, qkv, out});
  check_fused(ex, o, op, lse, s);
  const int64_t btc = s.B * s.T * s.C, rows = s.B * s.H * s.T;
  // the scores again, dp = dout·vᵀ, then dv, dq and dk: five products; the softmax's backward;
  // the rows' Σ dout·out
  o.flops(10.0 * score_pairs(s) * static_cast<double>(s.hs()), true), o.flops(6.0 * score_pairs(s) + 2.0 * btc);
  o.cost().bytes(3.0 * 4 * rows);  // lse read; the rows' Σ dout·out written and read (float32)
  float* dx = o.out(dqkv, 3 * btc);
  const float *dy = o.in(dout, btc), *x = o.in(qkv, 3 * btc), *y = o.in(out, btc);
  if (ex.meta) return;
  const float* l = lse.f32(op);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::attention_fused_backward(*ex.cuda, o.native(), dqkv.ptr, dout.ptr, qkv.ptr, out.ptr, l,
                                          scratch.f32(op), s);
#endif
  cpu::attention_fused_backward(*ex.pool, dx, dy, x, y, l, s);
  o.finish();
}

}  // namespace dp
