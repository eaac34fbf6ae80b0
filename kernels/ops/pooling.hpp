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
}  // namespace cuda

struct PoolShape {
  int64_t N, C, H, W, k, stride;
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * C * ((H - k) / stride + 1) * ((W - k) / stride + 1); }
};
inline void maxpool2d_forward(const Exec& ex, Buf out, Buf argmax, Buf in, const PoolShape& s) {
  Operands o(ex, "maxpool2d_forward");
  DP_DISPATCH(ex, maxpool2d_forward, o.out(out, s.out_numel()), argmax.i32("maxpool2d_forward"), o.in(in, s.in_numel()),
              s.N, s.C, s.H, s.W, s.k, s.stride);
  o.finish();
}
inline void maxpool2d_backward(const Exec& ex, Buf din, Buf dout, Buf argmax, const PoolShape& s) {
  Operands o(ex, "maxpool2d_backward");
  DP_DISPATCH(ex, maxpool2d_backward, o.out(din, s.in_numel()), o.in(dout, s.out_numel()),
              argmax.i32("maxpool2d_backward"), s.N, s.C, s.H, s.W, s.k, s.stride);
  o.finish();
}
// planes = N·C; HW = H·W.
inline void global_avgpool_forward(const Exec& ex, Buf out, Buf in, int64_t planes, int64_t HW) {
  Operands o(ex, "global_avgpool_forward");
  DP_DISPATCH(ex, global_avgpool_forward, o.out(out, planes), o.in(in, planes * HW), planes, HW);
  o.finish();
}
inline void global_avgpool_backward(const Exec& ex, Buf din, Buf dout, int64_t planes, int64_t HW) {
  Operands o(ex, "global_avgpool_backward");
  DP_DISPATCH(ex, global_avgpool_backward, o.out(din, planes * HW), o.in(dout, planes), planes, HW);
  o.finish();
}

}  // namespace dp
