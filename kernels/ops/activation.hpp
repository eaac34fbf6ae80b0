// ReLU6, SiLU, Sigmoid, Tanh, Hardswish and Hardsigmoid (kernels/activation_math.hpp): forward, and backward from the
// forward's input. On CUDA the 16-bit types are read and written directly (float32 arithmetic, one
// rounding on store); elsewhere they are widened (kernels/operands.hpp).
#pragma once
#include <cstdint>

#include "kernels/activation_math.hpp"
#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void activation_forward(ThreadPool& pool, Activation a, float* out, const float* in, int64_t n);
void activation_backward(ThreadPool& pool, Activation a, float* din, const float* dout, const float* in, int64_t n);
}  // namespace cpu
namespace cuda {
class Context;
void activation_forward(Context& c, Activation a, DType t, void* out, const void* in, int64_t n);
void activation_backward(Context& c, Activation a, DType t, void* din, const void* dout, const void* in, int64_t n);
// float32 (what DP_DISPATCH calls after widening)
void activation_forward(Context& c, Activation a, float* out, const float* in, int64_t n);
void activation_backward(Context& c, Activation a, float* din, const float* dout, const float* in, int64_t n);
}  // namespace cuda

inline void activation_forward(const Exec& ex, Activation a, Buf out, Buf in, int64_t n) {
  Operands o(ex, "activation_forward");
  o.flops(4.0 * n);
#if DP_WITH_CUDA
  const bool native = ex.on_cuda() && !ex.meta && out.dtype == in.dtype;  // float32 too
  if (native) o.keep_native(out.dtype);
#endif
  float* y = o.out(out, n);
  const float* x = o.in(in, n);
#if DP_WITH_CUDA
  if (native) return cuda::activation_forward(*ex.cuda, a, out.dtype, out.ptr, in.ptr, n);
#endif
  DP_DISPATCH(ex, activation_forward, a, y, x, n);
  o.finish();
}

inline void activation_backward(const Exec& ex, Activation a, Buf din, Buf dout, Buf in, int64_t n) {
  Operands o(ex, "activation_backward");
  o.flops(6.0 * n);
#if DP_WITH_CUDA
  const bool native = ex.on_cuda() && !ex.meta && din.dtype == dout.dtype && din.dtype == in.dtype;
  if (native) o.keep_native(din.dtype);
#endif
  float* dx = o.out(din, n);
  const float *dy = o.in(dout, n), *x = o.in(in, n);
#if DP_WITH_CUDA
  if (native) return cuda::activation_backward(*ex.cuda, a, din.dtype, din.ptr, dout.ptr, in.ptr, n);
#endif
  DP_DISPATCH(ex, activation_backward, a, dx, dy, x, n);
  o.finish();
}

}  // namespace dp
