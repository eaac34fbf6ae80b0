// Softmax over the last dimension, and the causal mask before it (an attention's scores):
//   softmax       out = exp(x − max) / Σ exp(x − max) per row of n; −inf gives exactly 0
//                 backward din = out ⊙ (dout − Σ dout ⊙ out)   (reads the forward's output)
//   log_softmax   out = x − max − log Σ exp(x − max)
//                 backward din = dout − exp(out) · Σ dout
//   causal_fill   x[.., i, j] = value where j > i, over matrices of [rows, cols] (masked_fill with
//                 nanoGPT's tril mask); its backward zeroes the same entries of the gradient
// Sums in double. The CPU's exp is the vectorised one of the attention kernels (fast_math.hpp), the
// GPU's the double one of its attention kernels; 16-bit operands go through Operands (float32
// arithmetic, one rounding on store).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void softmax_forward(ThreadPool& pool, float* out, const float* in, int64_t rows, int64_t n, bool log);
void softmax_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t rows, int64_t n,
                      bool log);
void causal_fill(ThreadPool& pool, float* x, int64_t matrices, int64_t rows, int64_t cols, float value);
}  // namespace cpu
namespace cuda {
void softmax_forward(Context& c, float* out, const float* in, int64_t rows, int64_t n, bool log);
void softmax_backward(Context& c, float* din, const float* dout, const float* out, int64_t rows, int64_t n, bool log);
void causal_fill(Context& c, float* x, int64_t matrices, int64_t rows, int64_t cols, float value);
}  // namespace cuda

inline void softmax_forward(const Exec& ex, Buf out, Buf in, int64_t rows, int64_t n, bool log) {
  Operands o(ex, "softmax_forward");
  o.flops(5.0 * rows * n);
  DP_DISPATCH(ex, softmax_forward, o.out(out, rows * n), o.in(in, rows * n), rows, n, log);
  o.finish();
}
inline void softmax_backward(const Exec& ex, Buf din, Buf dout, Buf out, int64_t rows, int64_t n, bool log) {
  Operands o(ex, "softmax_backward");
  o.flops(3.0 * rows * n);
  DP_DISPATCH(ex, softmax_backward, o.out(din, rows * n), o.in(dout, rows * n), o.in(out, rows * n), rows, n, log);
  o.finish();
}
// In place; value may be −inf (a 16-bit x holds it too).
inline void causal_fill(const Exec& ex, Buf x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  Operands o(ex, "causal_fill");  // no arithmetic: the masked scores are written
  DP_DISPATCH(ex, causal_fill, o.inout(x, matrices * rows * cols), matrices, rows, cols, value);
  o.finish();
}

}  // namespace dp
