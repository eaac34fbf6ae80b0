// Pooling over NCHW planes.
// MaxPool2d (kernel k, stride, padding that never wins — PyTorch pads with −inf — and ceil_mode):
// argmax holds the flat input index within each (n, c) plane; NaN wins, as in PyTorch. Backward
// gathers, so overlapping windows sum deterministically.
// AdaptiveAvgPool2d to 1x1 (ResNet's global average pool): out[n, c] = mean of the plane;
// backward spreads dout / (H·W) over it. AvgPool2d and AdaptiveAvgPool2d of any size: windows
// (kernels/avgpool_windows.hpp).
#pragma once
#include <cstdint>

#include "kernels/avgpool_windows.hpp"
#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {

struct PoolShape {
  int64_t N, C, H, W, k, stride;
  int64_t pad = 0;
  bool ceil = false;  // ceil_mode: a last, partial window where the input (and padding) leaves one
  int64_t OH() const { return out_size(H); }
  int64_t OW() const { return out_size(W); }
  // PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the input or
  // its left padding.
  int64_t out_size(int64_t n) const {
    const int64_t span = n + 2 * pad - k;
    int64_t o = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
    if (ceil && (o - 1) * stride >= n + pad) --o;
    return o;
  }
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * C * OH() * OW(); }
};

namespace cpu {
void maxpool2d_forward(ThreadPool& pool, float* out, int32_t* argmax, const float* in, const PoolShape& s);
void maxpool2d_backward(ThreadPool& pool, float* din, const float* dout, const int32_t* argmax, const PoolShape& s);
void global_avgpool_forward(ThreadPool& pool, float* out, const float* in, int64_t planes, int64_t HW);
void global_avgpool_backward(ThreadPool& pool, float* din, const float* dout, int64_t planes, int64_t HW);
void avgpool2d_forward(ThreadPool& pool, float* out, const float* in, const AvgPoolShape& s);
void avgpool2d_backward(ThreadPool& pool, float* din, const float* dout, const AvgPoolShape& s);
}  // namespace cpu
namespace cuda {
void maxpool2d_forward(Context& c, float* out, int32_t* argmax, const float* in, const PoolShape& s);
void maxpool2d_backward(Context& c, float* din, const float* dout, const int32_t* argmax, const PoolShape& s);
void global_avgpool_forward(Context& c, float* out, const float* in, int64_t planes, int64_t HW);
void global_avgpool_backward(Context& c, float* din, const float* dout, int64_t planes, int64_t HW);
// Any float storage type t for every float operand (16-bit: no widening, the same bits).
void maxpool2d_forward(Context& c, DType t, void* out, int32_t* argmax, const void* in, const PoolShape& s);
void maxpool2d_backward(Context& c, DType t, void* din, const void* dout, const int32_t* argmax, const PoolShape& s);
void global_avgpool_forward(Context& c, DType t, void* out, const void* in, int64_t planes, int64_t HW);
void global_avgpool_backward(Context& c, DType t, void* din, const void* dout, int64_t planes, int64_t HW);
void avgpool2d_forward(Context& c, DType t, void* out, const void* in, const AvgPoolShape& s);
void avgpool2d_backward(Context& c, DType t, void* din, const void* dout, const AvgPoolShape& s);
void avgpool2d_forward(Context& c, float* out, const float* in, const AvgPoolShape& s);
void avgpool2d_backward(Context& c, float* din, const float* dout, const AvgPoolShape& s);
}  // namespace cuda

inline void maxpool2d_forward(const Exec& ex, Buf out, Buf argmax, Buf in, const PoolShape& s) {
  Operands o(ex, "maxpool2d_forward", {out, in});
  o.flops(1.0 * s.out_numel() * s.k * s.k);
  o.cost().writes(argmax, s.out_numel());
  float* y = o.out(out, s.out_numel());
  const float* x = o.in(in, s.in_numel());
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::maxpool2d_forward(*ex.cuda, o.native(), out.ptr, argmax.i32("maxpool2d_forward"), in.ptr, s);
#endif
  DP_DISPATCH(ex, maxpool2d_forward, y, argmax.i32("maxpool2d_forward"), x, s);
  o.finish();
}
inline void maxpool2d_backward(const Exec& ex, Buf din, Buf dout, Buf argmax, const PoolShape& s) {
  Operands o(ex, "maxpool2d_backward", {din, dout});
  o.flops(1.0 * s.out_numel());
  o.cost().reads(argmax, s.out_numel());
  float* dx = o.out(din, s.in_numel());
  const float* dy = o.in(dout, s.out_numel());
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::maxpool2d_backward(*ex.cuda, o.native(), din.ptr, dout.ptr, argmax.i32("maxpool2d_backward"), s);
#endif
  DP_DISPATCH(ex, maxpool2d_backward, dx, dy, argmax.i32("maxpool2d_backward"), s);
  o.finish();
}
// planes = N·C; HW = H·W.
inline void global_avgpool_forward(const Exec& ex, Buf out, Buf in, int64_t planes, int64_t HW) {
  Operands o(ex, "global_avgpool_forward", {out, in});
  o.flops(1.0 * planes * HW);
  float* y = o.out(out, planes);
  const float* x = o.in(in, planes * HW);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::global_avgpool_forward(*ex.cuda, o.native(), out.ptr, in.ptr, planes, HW);
#endif
  DP_DISPATCH(ex, global_avgpool_forward, y, x, planes, HW);
  o.finish();
}
inline void global_avgpool_backward(const Exec& ex, Buf din, Buf dout, int64_t planes, int64_t HW) {
  Operands o(ex, "global_avgpool_backward", {din, dout});
  o.flops(1.0 * planes * HW);
  float* dx = o.out(din, planes * HW);
  const float* dy = o.in(dout, planes);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::global_avgpool_backward(*ex.cuda, o.native(), din.ptr, dout.ptr, planes, HW);
#endif
  DP_DISPATCH(ex, global_avgpool_backward, dx, dy, planes, HW);
  o.finish();
}

inline void avgpool2d_forward(const Exec& ex, Buf out, Buf in, const AvgPoolShape& s) {
  Operands o(ex, "avgpool2d_forward", {out, in});
  o.flops(s.adaptive ? 1.0 * s.in_numel() : 1.0 * s.out_numel() * s.k * s.k);
  float* y = o.out(out, s.out_numel());
  const float* x = o.in(in, s.in_numel());
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::avgpool2d_forward(*ex.cuda, o.native(), out.ptr, in.ptr, s);
#endif
  DP_DISPATCH(ex, avgpool2d_forward, y, x, s);
  o.finish();
}
inline void avgpool2d_backward(const Exec& ex, Buf din, Buf dout, const AvgPoolShape& s) {
  Operands o(ex, "avgpool2d_backward", {din, dout});
  o.flops(s.adaptive ? 1.0 * s.in_numel() : 1.0 * s.out_numel() * s.k * s.k);
  float* dx = o.out(din, s.in_numel());
  const float* dy = o.in(dout, s.out_numel());
#if DP_WITH_CUDA
  if (o.native() != DType::F32) return cuda::avgpool2d_backward(*ex.cuda, o.native(), din.ptr, dout.ptr, s);
#endif
  DP_DISPATCH(ex, avgpool2d_backward, dx, dy, s);
  o.finish();
}

}  // namespace dp
