// Softmax over the last dimension, and the causal mask before it (an attention's scores):
//   softmax       out = exp(x − max) / Σ exp(x − max) per row of n; −inf gives exactly 0
//                 backward din = out ⊙ (dout − Σ dout ⊙ out)   (reads the forward's output)
//   log_softmax   out = x − max − log Σ exp(x − max)
//                 backward din = dout − exp(out) · Σ dout
//   causal_fill   x[.., i, j] = value where j > i, over matrices of [rows, cols] (masked_fill with
//                 nanoGPT's tril mask); its backward zeroes the same entries of the gradient
// Sums in double. The CPU's exp is the vectorised one of the attention kernels (fast_math.hpp), the
// GPU's the double one of its attention kernels. 16-bit operands: float32 arithmetic and one
// rounding on store — on a GPU in the kernels themselves (no widening copies), on a CPU through
// Operands.
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
// Every tensor of 16-bit type t: the float32 kernels' arithmetic on the loaded values.
void softmax_forward(Context& c, DType t, void* out, const void* in, int64_t rows, int64_t n, bool log);
void softmax_backward(Context& c, DType t, void* din, const void* dout, const void* out, int64_t rows, int64_t n,
                      bool log);
void causal_fill(Context& c, DType t, void* x, int64_t matrices, int64_t rows, int64_t cols, float value);
}  // namespace cuda

inline void softmax_forward(const Exec& ex, Buf out, Buf in, int64_t rows, int64_t n, bool log) {
  Operands o(ex, "softmax_forward", {out, in});
  o.flops(5.0 * rows * n);
  float* y = o.out(out, rows * n);
  const float* x = o.in(in, rows * n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::softmax_forward(*ex.cuda, o.native(), out.ptr, in.ptr, rows, n, log);
#endif
  DP_DISPATCH(ex, softmax_forward, y, x, rows, n, log);
  o.finish();
}
inline void softmax_backward(const Exec& ex, Buf din, Buf dout, Buf out, int64_t rows, int64_t n, bool log) {
  Operands o(ex, "softmax_backward", {din, dout, out});
  o.flops(3.0 * rows * n);
  float* dx = o.out(din, rows * n);
  const float *dy = o.in(dout, rows * n), *y = o.in(out, rows * n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::softmax_backward(*ex.cuda, o.native(), din.ptr, dout.ptr, out.ptr, rows, n, log);
#endif
  DP_DISPATCH(ex, softmax_backward, dx, dy, y, rows, n, log);
  o.finish();
}
// In place; value may be −inf (a 16-bit x holds it too).
inline void causal_fill(const Exec& ex, Buf x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  Operands o(ex, "causal_fill", {x});  // no arithmetic: the masked scores are written
  float* px = o.inout(x, matrices * rows * cols);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::causal_fill(*ex.cuda, o.native(), x.ptr, matrices, rows, cols, value);
#endif
  DP_DISPATCH(ex, causal_fill, px, matrices, rows, cols, value);
  o.finish();
}

}  // namespace dp
