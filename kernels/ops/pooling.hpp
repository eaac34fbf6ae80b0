// Pooling over NCHW planes.
// MaxPool2d (no padding): argmax holds the flat input index within each (n, c) plane; NaN wins,
// as in PyTorch. Backward gathers, so overlapping windows sum deterministically.
// AdaptiveAvgPool2d to 1x1 (ResNet's global average pool): out[n, c] = mean of the plane;
// backward spreads dout / (H·W) over it.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void maxpool2d_forward(ThreadPool& pool, float* out, int32_t* argmax, const float* in, int64_t N, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t stride);
void maxpool2d_backward(ThreadPool& pool, float* din, const float* dout, const int32_t* argmax, int64_t N,
                        int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride);
void global_avgpool_forward(ThreadPool& pool, float* out, const float* in, int64_t planes, int64_t HW);
void global_avgpool_backward(ThreadPool& pool, float* din, const float* dout, int64_t planes, int64_t HW);
}  // namespace cpu
namespace cuda {
void maxpool2d_forward(Context& c, float* out, int32_t* argmax, const float* in, int64_t N, int64_t C, int64_t H,
                       int64_t W, int64_t k, int64_t stride);
void maxpool2d_backward(Context& c, float* din, const float* dout, const int32_t* argmax, int64_t N, int64_t C,
                        int64_t H, int64_t W, int64_t k, int64_t stride);
void global_avgpool_forward(Context& c, float* out, const float* in, int64_t planes, int64_t HW);
void global_avgpool_backward(Context& c, float* din, const float* dout, int64_t planes, int64_t HW);
// Any float storage type t for every float operand (16-bit: no widening, the same bits).
void maxpool2d_forward(Context& c, DType t, void* out, int32_t* argmax, const void* in, int64_t N, int64_t C,
                       int64_t H, int64_t W, int64_t k, int64_t stride);
void maxpool2d_backward(Context& c, DType t, void* din, const void* dout, const int32_t* argmax, int64_t N, int64_t C,
                        int64_t H, int64_t W, int64_t k, int64_t stride);
void global_avgpool_forward(Context& c, DType t, void* out, const void* in, int64_t planes, int64_t HW);
void global_avgpool_backward(Context& c, DType t, void* din, const void* dout, int64_t planes, int64_t HW);
}  // namespace cuda

struct PoolShape {
  int64_t N, C, H, W, k, stride;
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * C * ((H - k) / stride + 1) * ((W - k) / stride + 1); }
};
inline void maxpool2d_forward(const Exec& ex, Buf out, Buf argmax, Buf in, const PoolShape& s) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {out, in}); t != DType::F32)
    return cuda::maxpool2d_forward(*ex.cuda, t, out.ptr, argmax.i32("maxpool2d_forward"), in.ptr, s.N, s.C, s.H, s.W,
                                   s.k, s.stride);
#endif
  Operands o(ex, "maxpool2d_forward");
  DP_DISPATCH(ex, maxpool2d_forward, o.out(out, s.out_numel()), argmax.i32("maxpool2d_forward"), o.in(in, s.in_numel()),
              s.N, s.C, s.H, s.W, s.k, s.stride);
  o.finish();
}
inline void maxpool2d_backward(const Exec& ex, Buf din, Buf dout, Buf argmax, const PoolShape& s) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {din, dout}); t != DType::F32)
    return cuda::maxpool2d_backward(*ex.cuda, t, din.ptr, dout.ptr, argmax.i32("maxpool2d_backward"), s.N, s.C, s.H,
                                    s.W, s.k, s.stride);
#endif
  Operands o(ex, "maxpool2d_backward");
  DP_DISPATCH(ex, maxpool2d_backward, o.out(din, s.in_numel()), o.in(dout, s.out_numel()),
              argmax.i32("maxpool2d_backward"), s.N, s.C, s.H, s.W, s.k, s.stride);
  o.finish();
}
// planes = N·C; HW = H·W.
inline void global_avgpool_forward(const Exec& ex, Buf out, Buf in, int64_t planes, int64_t HW) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {out, in}); t != DType::F32)
    return cuda::global_avgpool_forward(*ex.cuda, t, out.ptr, in.ptr, planes, HW);
#endif
  Operands o(ex, "global_avgpool_forward");
  DP_DISPATCH(ex, global_avgpool_forward, o.out(out, planes), o.in(in, planes * HW), planes, HW);
  o.finish();
}
inline void global_avgpool_backward(const Exec& ex, Buf din, Buf dout, int64_t planes, int64_t HW) {
#if DP_WITH_CUDA
  if (const DType t = native_16bit(ex, {din, dout}); t != DType::F32)
    return cuda::global_avgpool_backward(*ex.cuda, t, din.ptr, dout.ptr, planes, HW);
#endif
  Operands o(ex, "global_avgpool_backward");
  DP_DISPATCH(ex, global_avgpool_backward, o.out(din, planes * HW), o.in(dout, planes), planes, HW);
  o.finish();
}

}  // namespace dp
