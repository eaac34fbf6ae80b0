// Conv2d (square stride and padding, NCHW, weight [K, C/groups, kh, kw], bias optional; groups and
// dilation as PyTorch's). CPU: im2col +
// one GEMM per sample (Caffe's approach) over the caller's workspace; CUDA: cuDNN, its workspace
// from the device's allocator (MemCategory::Workspace), 16-bit operands on the tensor cores; in
// float32 with deterministic algorithms (--cudnn's default), a small filter's weight gradient is
// dp's own (conv2d_weight_grad_direct).
// Backward: din may be absent (the first layer), db absent without a bias; dw, db are written.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

namespace dp {

struct ConvShape {
  int64_t N, C, H, W;  // input
  int64_t K, kh, kw;   // output channels, kernel
  int64_t stride, pad;  // pad: the height's, and the width's unless pad_width says otherwise
  // groups: C and K in that many independent parts (depthwise: groups = C), the weight
  // [K, C/groups, kh, kw]; dilation: the kernel's taps that many pixels apart.
  int64_t groups = 1, dilation = 1;
  int64_t pad_width = -1;  // -1: pad (a square padding); else the width's (Inception's 1x7 and 7x1)
  int64_t ph() const { return pad; }
  int64_t pw() const { return pad_width < 0 ? pad : pad_width; }
  int64_t OH() const { return (H + 2 * ph() - dilation * (kh - 1) - 1) / stride + 1; }
  int64_t OW() const { return (W + 2 * pw() - dilation * (kw - 1) - 1) / stride + 1; }
  int64_t col_rows() const { return C / groups * kh * kw; }  // one group's: the weight's row length
  int64_t all_col_rows() const { return C * kh * kw; }      // every group's: the column buffer's rows
  int64_t col_cols() const { return OH() * OW(); }
  int64_t in_numel() const { return N * C * H * W; }
  int64_t out_numel() const { return N * K * OH() * OW(); }
  int64_t weight_numel() const { return K * col_rows(); }
};

namespace cpu {
// Floats of workspace the conv kernels need with `threads` threads.
int64_t conv2d_workspace_floats(const ConvShape& s, int threads, bool backward);
void conv2d_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b, const ConvShape& s,
                    float* workspace);
void conv2d_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, const ConvShape& s, float* workspace);
}  // namespace cpu
namespace cuda {
void conv2d_forward(Context& c, ScratchMemory& alloc, float* out, const float* in, const float* w, const float* b, const ConvShape& s);
void conv2d_backward(Context& c, ScratchMemory& alloc, float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                     const ConvShape& s);
// dw alone, float32, without cuDNN, when the filter has at most conv_wgrad::kMaxTaps taps: tiles of
// taps summed over parts of the output positions, the parts added in a fixed order
// (kernels/conv_wgrad_parts.hpp), the same bits every run and on every GPU. False, having done
// nothing, for a larger filter.
bool conv2d_weight_grad_direct(Context& c, ScratchMemory& alloc, float* dw, const float* dout, const float* in,
                               const ConvShape& s);
// Every present operand of 16-bit type t, on the tensor cores (float32 accumulation, one rounding
// on store; a bias is added in a second rounding, as PyTorch's cuDNN path does), where
// conv2d_16bit_usable says cuDNN offers an algorithm for this geometry in 16 bits.
bool conv2d_16bit_usable(Context& c, ScratchMemory& alloc, const ConvShape& s, DType t);
void conv2d_forward(Context& c, ScratchMemory& alloc, DType t, void* out, const void* in, const void* w,
                    const void* b, const ConvShape& s);
void conv2d_backward(Context& c, ScratchMemory& alloc, DType t, void* din, void* dw, void* db, const void* dout,
                     const void* in, const void* w, const ConvShape& s);
}  // namespace cuda

// A convolution's workspace, decided once for every backend: its CPU kernel's need at one thread
// (one sample's columns and padded input; in backward also a weight-gradient partial), or in
// backward the GPU's partial sums of the weight and bias gradients if more. A CUDA device holds
// exactly this, cuDNN's algorithms chosen to fit in it (kernels/cuda/cudnn_layers.cu) and the
// partial sums taken from it; host and meta devices hold it too (a host device with T threads its
// CPU kernel's T column buffers, if more).
size_t conv2d_workspace_bytes(const ConvShape& s, bool backward);
// Floats of workspace the caller provides for one call on ex's device.
int64_t conv2d_workspace_floats(const Exec& ex, const ConvShape& s, bool backward);
void conv2d_forward(const Exec& ex, Buf out, Buf in, Buf w, Buf b, const ConvShape& s, Buf workspace);
void conv2d_backward(const Exec& ex, Buf din, Buf dw, Buf db, Buf dout, Buf in, Buf w, const ConvShape& s,
                     Buf workspace);

}  // namespace dp
