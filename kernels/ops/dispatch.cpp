// The ops whose CPU and CUDA bodies take different arguments (workspace, scratch memory, two
// devices): their dispatch, out of line.
#include <cstring>

#include "engine/error.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/conv2d.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/memory.hpp"
#include "engine/host/thread_pool.hpp"

namespace dp {

void copy_between(const Exec& to, void* dst, const void* src, size_t bytes, const Exec& from) {
  if (bytes == 0) return;
  if (to.on_cuda() != from.on_cuda())
    throw RuntimeError("copy between a CUDA device and a host device is not supported");
#if DP_WITH_CUDA
  if (to.on_cuda()) return cuda::copy(*to.cuda, dst, src, bytes, *from.cuda);
#endif
  std::memcpy(dst, src, bytes);
}

void convert(const Exec& ex, Buf dst, Buf src, int64_t n) {
  constexpr const char* op = "convert";
  if (dst.dtype == src.dtype) return copy_between(ex, dst.ptr, src.ptr, static_cast<size_t>(n) * dtype_size(dst.dtype), ex);
  if (src.dtype == DType::F32 && dst.dtype == DType::BF16) return DP_DISPATCH(ex, float_to_bf16, dst.bf16(op), src.f32(op), n);
  if (src.dtype == DType::F32 && dst.dtype == DType::F16) return DP_DISPATCH(ex, float_to_f16, dst.f16(op), src.f32(op), n);
  if (src.dtype == DType::BF16 && dst.dtype == DType::F32) return DP_DISPATCH(ex, bf16_to_float, dst.f32(op), src.bf16(op), n);
  if (src.dtype == DType::F16 && dst.dtype == DType::F32) return DP_DISPATCH(ex, f16_to_float, dst.f32(op), src.f16(op), n);
  throw RuntimeError(std::string("convert: ") + dtype_name(src.dtype) + " to " + dtype_name(dst.dtype) +
                     " is not implemented (float32 to and from bfloat16 or float16)");
}

int64_t conv2d_workspace_floats(const Exec& ex, const ConvShape& s, bool backward) {
  if (ex.on_cuda()) return 0;  // cuDNN's own
  return cpu::conv2d_workspace_floats(s, ex.pool->size(), backward);
}

void conv2d_forward(const Exec& ex, Buf out, Buf in, Buf w, Buf b, const ConvShape& s, Buf workspace) {
  constexpr const char* op = "conv2d_forward";
#if DP_WITH_CUDA
  if (ex.on_cuda()) return cuda::conv2d_forward(*ex.cuda, out.f32(op), in.f32(op), w.f32(op), b.f32(op), s);
#endif
  cpu::conv2d_forward(*ex.pool, out.f32(op), in.f32(op), w.f32(op), b.f32(op), s, workspace.f32(op));
}

void conv2d_backward(const Exec& ex, Buf din, Buf dw, Buf db, Buf dout, Buf in, Buf w, const ConvShape& s,
                     Buf workspace) {
  constexpr const char* op = "conv2d_backward";
#if DP_WITH_CUDA
  if (ex.on_cuda())
    return cuda::conv2d_backward(*ex.cuda, din.f32(op), dw.f32(op), db.f32(op), dout.f32(op), in.f32(op), w.f32(op), s);
#endif
  cpu::conv2d_backward(*ex.pool, din.f32(op), dw.f32(op), db.f32(op), dout.f32(op), in.f32(op), w.f32(op), s,
                       workspace.f32(op));
}

double softmax_xent(const Exec& ex, Buf logits, Buf labels, int64_t B, int64_t K, Buf dlogits, float grad_scale,
                    int64_t* correct) {
  constexpr const char* op = "softmax_xent";
#if DP_WITH_CUDA
  if (ex.on_cuda())
    return cuda::softmax_xent(*ex.cuda, *ex.alloc, logits.f32(op), labels.i32(op), B, K, dlogits.f32(op), grad_scale,
                              correct);
#endif
  return cpu::softmax_xent(logits.f32(op), labels.i32(op), B, K, dlogits.f32(op), grad_scale, correct);
}

int64_t attention_scratch_floats(const Exec& ex, const AttentionShape& s, bool backward) {
  if (!ex.on_cuda()) return 0;
  return 4 * s.B * s.T * s.C + (backward ? s.B * s.H * s.T * s.T : 0);
}

void attention_forward(const Exec& ex, Buf out, Buf att, Buf qkv, const AttentionShape& s, Buf scratch) {
  constexpr const char* op = "attention_forward";
#if DP_WITH_CUDA
  if (ex.on_cuda()) return cuda::attention_forward(*ex.cuda, out.f32(op), att.f32(op), qkv.f32(op), s, scratch.f32(op));
#endif
  cpu::attention_forward(*ex.pool, out.f32(op), att.f32(op), qkv.f32(op), s);
}

void attention_backward(const Exec& ex, Buf dqkv, Buf dout, Buf qkv, Buf att, const AttentionShape& s, Buf scratch) {
  constexpr const char* op = "attention_backward";
#if DP_WITH_CUDA
  if (ex.on_cuda())
    return cuda::attention_backward(*ex.cuda, dqkv.f32(op), dout.f32(op), qkv.f32(op), att.f32(op), s, scratch.f32(op));
#endif
  cpu::attention_backward(*ex.pool, dqkv.f32(op), dout.f32(op), qkv.f32(op), att.f32(op), s);
}

}  // namespace dp
