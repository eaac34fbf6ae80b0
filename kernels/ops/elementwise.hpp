// Element-wise ops: ReLU (its backward reads the forward output: out > 0 <=> in > 0; NaN stays
// NaN, as in PyTorch), y += x (the reduce's sum and a residual connection), adding a scalar to
// one element (BatchNorm's num_batches_tracked), y ·= s, and Σ x² returned to the host in double
// (gradient clipping's global norm; the call completes the device's work before it).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void relu_forward(ThreadPool& pool, float* out, const float* in, int64_t n);
void relu_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t n);
void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n);
void add_scalar(ThreadPool& pool, float* y, float value);
void scale(ThreadPool& pool, float* y, float s, int64_t n);
double sum_squares(ThreadPool& pool, const float* x, int64_t n);
}  // namespace cpu
namespace cuda {
void relu_forward(Context& c, float* out, const float* in, int64_t n);
void relu_backward(Context& c, float* din, const float* dout, const float* out, int64_t n);
void add_inplace(Context& c, float* y, const float* x, int64_t n);
void add_scalar(Context& c, float* y, float value);
void scale(Context& c, float* y, float s, int64_t n);
double sum_squares(Context& c, const float* x, int64_t n);
}  // namespace cuda

inline void relu_forward(const Exec& ex, Buf out, Buf in, int64_t n) {
  Operands o(ex, "relu_forward");
  DP_DISPATCH(ex, relu_forward, o.out(out, n), o.in(in, n), n);
  o.finish();
}
inline void relu_backward(const Exec& ex, Buf din, Buf dout, Buf out, int64_t n) {
  Operands o(ex, "relu_backward");
  DP_DISPATCH(ex, relu_backward, o.out(din, n), o.in(dout, n), o.in(out, n), n);
  o.finish();
}
inline void add_inplace(const Exec& ex, Buf y, Buf x, int64_t n) {
  Operands o(ex, "add_inplace");
  DP_DISPATCH(ex, add_inplace, o.inout(y, n), o.in(x, n), n);
  o.finish();
}
inline void add_scalar(const Exec& ex, Buf y, float value) { DP_DISPATCH(ex, add_scalar, y.f32("add_scalar"), value); }
inline void scale(const Exec& ex, Buf y, float s, int64_t n) {
  Operands o(ex, "scale");
  DP_DISPATCH(ex, scale, o.inout(y, n), s, n);
  o.finish();
}
inline double sum_squares(const Exec& ex, Buf x, int64_t n) {
  Operands o(ex, "sum_squares");
  return DP_DISPATCH(ex, sum_squares, o.in(x, n), n);
}

}  // namespace dp
