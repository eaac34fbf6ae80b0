// Fused ("flash") self-attention: attention.hpp's op (packed qkv [B, T, 3C], H heads, causal or
// not) without its probabilities. Forward writes out [B, T, C] and each row's log-sum-exp
// lse [B, H, T] (float32: max + log Σ exp(score − max)) instead of att [B, H, T, T]; backward
// recomputes every probability as exp(score − lse) from q and k, and takes out for the rows'
// Σ dout·out (the softmax backward's Σ_j p_j·dp_j). What a layer keeps for backward is then
// O(T) a head, not O(T²): PyTorch's scaled_dot_product_attention on its flash path.
//
// Where it applies (attention_fused_applies): 16-bit operands (the CUDA kernels run on the tensor
// cores), no bias, no dropout on the probabilities, heads of 32 or 64 — a rule of the shape and
// type only, so that host, meta and CUDA devices keep the same tensors and a plan holds for a GPU.
// CPU: the same arithmetic in float32 over the widened operands (OpenBLAS per head), each 16-bit
// result rounded once; CUDA: kernels/cuda/attention_fused.cu.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/ops/attention.hpp"

namespace dp {

// The head sizes the fused kernels are built for.
inline bool attention_fused_head_size(int64_t hs) { return hs == 32 || hs == 64; }
inline bool attention_fused_applies(const AttentionShape& s, DType t, bool dropout) {
  return (t == DType::BF16 || t == DType::F16) && !dropout && s.bias_blocks == 0 && s.C % s.H == 0 &&
         attention_fused_head_size(s.hs());
}

namespace cpu {
void attention_fused_forward(ThreadPool& pool, float* out, float* lse, const float* qkv, const AttentionShape& s);
void attention_fused_backward(ThreadPool& pool, float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, const AttentionShape& s);
}  // namespace cpu
namespace cuda {
class Context;
// qkv, out, dout, dqkv of 16-bit type t; scratch: attention_fused_scratch_floats.
void attention_fused_forward(Context& c, DType t, void* out, float* lse, const void* qkv, const AttentionShape& s);
void attention_fused_backward(Context& c, DType t, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, float* scratch, const AttentionShape& s);
}  // namespace cuda

// Backward's scratch (the rows' Σ dout·out, B·H·T floats), held on every backend alike.
inline int64_t attention_fused_scratch_floats(const AttentionShape& s) { return s.B * s.H * s.T; }
// lse [B, H, T] float32; out, qkv (and dout, dqkv) of one float type.
void attention_fused_forward(const Exec& ex, Buf out, Buf lse, Buf qkv, const AttentionShape& s);
void attention_fused_backward(const Exec& ex, Buf dqkv, Buf dout, Buf qkv, Buf out, Buf lse, const AttentionShape& s,
                              Buf scratch);

}  // namespace dp
