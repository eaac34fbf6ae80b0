// Element-wise ops: ReLU (its backward reads the forward output: out > 0 <=> in > 0; NaN stays
// NaN, as in PyTorch), y += x (the reduce's sum and a residual connection), adding a scalar to
// one element (BatchNorm's num_batches_tracked), y ·= s (s may be read from device memory when the
// kernel runs: fp16's unscaling by the step's 1/scale, kernels/scalar_arg.hpp), and Σ x² returned to the host in double
// (gradient clipping's global norm; the call completes the device's work before it).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"
#include "kernels/scalar_arg.hpp"

namespace dp {
namespace cpu {
void relu_forward(ThreadPool& pool, float* out, const float* in, int64_t n);
void relu_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t n);
void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n);
void add_scalar(ThreadPool& pool, float* y, float value);
void scale(ThreadPool& pool, float* y, ScalarArg s, int64_t n);
double sum_squares(ThreadPool& pool, const float* x, int64_t n);
}  // namespace cpu
namespace cuda {
void relu_forward(Context& c, float* out, const float* in, int64_t n);
void relu_backward(Context& c, float* din, const float* dout, const float* out, int64_t n);
void add_inplace(Context& c, float* y, const float* x, int64_t n);
void add_scalar(Context& c, float* y, float value);
void scale(Context& c, float* y, ScalarArg s, int64_t n);
// Without waiting: Σ x² into *out (host memory, page-locked for the copy to be asynchronous) as the
// stream gets there, and with clip > 0 the scaling decided on the device (found_inf: see below).
// Scratch (a double per block) from `alloc`, counted as workspace, returned stream-ordered.
void sum_squares_and_clip(Context& c, ScratchMemory& alloc, float* x, int64_t n, float clip, double* out,
                          int32_t* found_inf);
// 16-bit storage (kernels/cuda/elementwise_16bit.cu); add_inplace's y and x may differ (a float32
// y with a 16-bit x: the reduce into the master gradients).
void relu_forward(Context& c, DType t, void* out, const void* in, int64_t n);
void relu_backward(Context& c, DType t, void* din, const void* dout, const void* out, int64_t n);
void add_inplace(Context& c, DType ty, void* y, DType tx, const void* x, int64_t n);
// y += xs[0], then += xs[1], … in one pass over y, each add rounded to y's type as add_inplace's
// is: the bits of add_inplace once per x, in order, reading y and writing it once instead of once
// per x. The xs (one dtype) are read where they are: memory this GPU can address.
void add_many_inplace(Context& c, DType ty, void* y, DType tx, const std::vector<const void*>& xs, int64_t n);
}  // namespace cuda

inline void relu_forward(const Exec& ex, Buf out, Buf in, int64_t n) {
  Operands o(ex, "relu_forward", {out, in});
  o.flops(1.0 * n);
  float* y = o.out(out, n);
  const float* x = o.in(in, n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::relu_forward(*ex.cuda, o.native(), out.ptr, in.ptr, n);
#endif
  DP_DISPATCH(ex, relu_forward, y, x, n);
  o.finish();
}
inline void relu_backward(const Exec& ex, Buf din, Buf dout, Buf out, int64_t n) {
  Operands o(ex, "relu_backward", {din, dout, out});
  o.flops(1.0 * n);
  float* dx = o.out(din, n);
  const float *dy = o.in(dout, n), *y = o.in(out, n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::relu_backward(*ex.cuda, o.native(), din.ptr, dout.ptr, out.ptr, n);
#endif
  DP_DISPATCH(ex, relu_backward, dx, dy, y, n);
  o.finish();
}
inline void add_inplace(const Exec& ex, Buf y, Buf x, int64_t n) {
  Operands o(ex, "add_inplace");
  o.flops(1.0 * n);
#if DP_WITH_CUDA
  // any mix of float types with a 16-bit one (the reduce adds 16-bit gradients into float32 ones)
  auto is_float = [](DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; };
  const bool native = ex.on_cuda() && is_float(y.dtype) && is_float(x.dtype) &&
                      (y.dtype != DType::F32 || x.dtype != DType::F32);
  if (native) o.keep_native(y.dtype != DType::F32 ? y.dtype : x.dtype);
#endif
  float* py = o.inout(y, n);
  const float* px = o.in(x, n);
#if DP_WITH_CUDA
  if (native) return cuda::add_inplace(*ex.cuda, y.dtype, y.ptr, x.dtype, x.ptr, n);
#endif
  DP_DISPATCH(ex, add_inplace, py, px, n);
  o.finish();
}
// y += x for each x of xs (one dtype), in order. On a GPU one kernel (cuda::add_many_inplace); on
// host devices add_inplace once per x, which is what that kernel reproduces.
void add_many_inplace(const Exec& ex, Buf y, const std::vector<Buf>& xs, int64_t n);  // kernels/ops/dispatch.cpp
inline void add_scalar(const Exec& ex, Buf y, float value) {
  OpCounter c(ex, "add_scalar");  // one value
  c.updates(y, 1), c.flops(1);
  DP_DISPATCH(ex, add_scalar, y.f32("add_scalar"), value);
}
inline void scale(const Exec& ex, Buf y, ScalarArg s, int64_t n) {
  Operands o(ex, "scale");
  o.flops(1.0 * n);
  DP_DISPATCH(ex, scale, o.inout(y, n), s, n);
  o.finish();
}
// clip_grad_norm_ without the host: *out = Σ x² (read by the host after waiting for the stream);
// with clip > 0, x ·= clip / (√Σ + 1e-6) when that is below 1 (coefficient in double, applied as
// float32, as the host would). float32 x only (the master gradients). The sum's order is fixed: the
// same bits every run. With found_inf (an int32 in device memory: fp16's GradScaler check), it
// becomes 1 when the sum is inf or NaN — some x is — and 0 otherwise, and a non-finite sum leaves
// x unclipped (the update will be skipped); without it, a non-finite norm clips as PyTorch does.
void sum_squares_and_clip(const Exec& ex, Buf x, int64_t n, float clip, double* out, Buf found_inf = {});

}  // namespace dp
