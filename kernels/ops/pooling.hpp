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
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {out, in}); t != DType::F32)
    return cuda::maxpool2d_forward(*ex.cuda, t, out.ptr, argmax.i32("maxpool2d_forward"), in.ptr, s);
#endif
  Operands o(ex, "maxpool2d_forward");
  o.flops(1.0 * s.out_numel() * s.k * s.k);
  o.cost().writes(argmax, s.out_numel());
  DP_DISPATCH(ex, maxpool2d_forward, o.out(out, s.out_numel()), argmax.i32("maxpool2d_forward"), o.in(in, s.in_numel()),
              s);
  o.finish();
}
inline void maxpool2d_backward(const Exec& ex, Buf din, Buf dout, Buf argmax, const PoolShape& s) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {din, dout}); t != DType::F32)
    return cuda::maxpool2d_backward(*ex.cuda, t, din.ptr, dout.ptr, argmax.i32("maxpool2d_backward"), s);
#endif
  Operands o(ex, "maxpool2d_backward");
  o.flops(1.0 * s.out_numel());
  o.cost().reads(argmax, s.out_numel());
  DP_DISPATCH(ex, maxpool2d_backward, o.out(din, s.in_numel()), o.in(dout, s.out_numel()),
              argmax.i32("maxpool2d_backward"), s);
  o.finish();
}
// planes = N·C; HW = H·W.
inline void global_avgpool_forward(const Exec& ex, Buf out, Buf in, int64_t planes, int64_t HW) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {out, in}); t != DType::F32)
    return cuda::global_avgpool_forward(*ex.cuda, t, out.ptr, in.ptr, planes, HW);
#endif
  Operands o(ex, "global_avgpool_forward");
  o.flops(1.0 * planes * HW);
  DP_DISPATCH(ex, global_avgpool_forward, o.out(out, planes), o.in(in, planes * HW), planes, HW);
  o.finish();
}
inline void global_avgpool_backward(const Exec& ex, Buf din, Buf dout, int64_t planes, int64_t HW) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {din, dout}); t != DType::F32)
    return cuda::global_avgpool_backward(*ex.cuda, t, din.ptr, dout.ptr, planes, HW);
#endif
  Operands o(ex, "global_avgpool_backward");
  o.flops(1.0 * planes * HW);
  DP_DISPATCH(ex, global_avgpool_backward, o.out(din, planes * HW), o.in(dout, planes), planes, HW);
  o.finish();
}

inline void avgpool2d_forward(const Exec& ex, Buf out, Buf in, const AvgPoolShape& s) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {out, in}); t != DType::F32) return cuda::avgpool2d_forward(*ex.cuda, t, out.ptr, in.ptr, s);
#endif
  Operands o(ex, "avgpool2d_forward");
  o.flops(s.adaptive ? 1.0 * s.in_numel() : 1.0 * s.out_numel() * s.k * s.k);
  DP_DISPATCH(ex, avgpool2d_forward, o.out(out, s.out_numel()), o.in(in, s.in_numel()), s);
  o.finish();
}
inline void avgpool2d_backward(const Exec& ex, Buf din, Buf dout, const AvgPoolShape& s) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {din, dout}); t != DType::F32)
    return cuda::avgpool2d_backward(*ex.cuda, t, din.ptr, dout.ptr, s);
#endif
  Operands o(ex, "avgpool2d_backward");
  o.flops(s.adaptive ? 1.0 * s.in_numel() : 1.0 * s.out_numel() * s.k * s.k);
  DP_DISPATCH(ex, avgpool2d_backward, o.out(din, s.in_numel()), o.in(dout, s.out_numel()), s);
  o.finish();
}

}  // namespace dp
