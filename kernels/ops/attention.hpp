// Self-attention over a packed qkv: qkv [B, T, 3C] holds q, k, v in that order (c_attn's
// output); H heads of hs = C/H. For each (b, h): scores = q·kᵀ·scale (1/√hs unless the shape says
// another) plus an additive bias if one is given, with the causal mask (query t sees keys ≤ t; or,
// not causal, every key), att = softmax(scores) per row, out[b, :, h·hs..] = att·v. att [B, H, T, T] is
// kept for backward (counted as activations: it is the T² in a transformer's memory).
// Backward writes dqkv [B, T, 3C] from dout [B, T, C].
//
// The bias (Swin's and MaxViT's relative position bias, Swin's shifted-window mask) is
// [bias_blocks, H, T, T]: sample b's scores get block b % bias_blocks (a window's position among a
// sample's windows). Backward then also writes dscores [B, H, T, T], the gradient of the biased
// scores: the bias's gradient sample by sample, which its owner reduces. CPU: OpenBLAS on the heads' strided views;
// CUDA: cuBLAS strided-batched GEMMs over (b, h) after a permute to [B·H, T, hs] — on 16-bit
// operands natively (tensor cores, float32 accumulation, the softmax in float32 over the 16-bit
// scores in att; no float32 copy of the scores), on host devices through the operands' widening
// (the CPU reference: float32 throughout, each 16-bit result rounded once).
//
// With a dropout mask that is on (nanoGPT's attn_dropout): out = (att ⊙ f)·v, f the mask's factors
// over each sample's [H, T, T] probabilities (kernels/ops/dropout.hpp), while att keeps the
// probabilities themselves, which softmax's backward needs; backward draws the mask again.
#pragma once
#include <cstdint>

#include "kernels/dropout_mask.hpp"
#include "kernels/exec.hpp"

namespace dp {

struct AttentionShape {
  int64_t B, T, C, H;
  bool causal = true;  // false: every query sees every key (a ViT's, nn.MultiheadAttention's)
  float scale = 0;     // the scores' factor; 0: 1/√hs
  int64_t bias_blocks = 0;  // 0: no bias
  // The last key query t sees.
  int64_t last_key(int64_t t) const { return causal ? t : T - 1; }
  int64_t hs() const { return C / H; }
  float score_scale() const;
  int64_t score_count() const { return B * H * T * T; }
};

namespace cpu {
// bias: null unless s.bias_blocks > 0; dscores: written when not null.
void attention_forward(ThreadPool& pool, float* out, float* att, const float* qkv, const AttentionShape& s,
                       const DropoutMask& drop, const float* bias);
void attention_backward(ThreadPool& pool, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s, const DropoutMask& drop, float* dscores);
}  // namespace cpu
namespace cuda {
// `scratch` holds 4·B·T·C elements (the permuted q, k, v and the head outputs), for backward
// B·H·T·T more (the score gradients), and with dropout B·H·T·T more (the dropped probabilities);
// attention_scratch_floats says how much.
void attention_forward(Context& c, float* out, float* att, const float* qkv, const AttentionShape& s, float* scratch,
                       const DropoutMask& drop, const float* bias);
void attention_backward(Context& c, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s, float* scratch, const DropoutMask& drop, float* dscores);
// Every operand (scratch included) of 16-bit type t (kernels/cuda/attention_16bit.cu).
void attention_forward(Context& c, DType t, void* out, void* att, const void* qkv, const AttentionShape& s,
                       void* scratch, const DropoutMask& drop, const void* bias);
void attention_backward(Context& c, DType t, void* dqkv, const void* dout, const void* qkv, const void* att,
                        const AttentionShape& s, void* scratch, const DropoutMask& drop, void* dscores);
}  // namespace cuda

// Floats of scratch the caller provides: the CUDA kernels' need for qkv of type `element` (its
// elements are that type's size: 16-bit operands need half), on every backend (host devices hold it
// unused), so that host, meta and CUDA devices allocate alike and a plan counts it.
int64_t attention_scratch_floats(const Exec& ex, const AttentionShape& s, DType element, bool backward,
                                 bool dropout = false);
// bias [bias_blocks, H, T, T] when s.bias_blocks > 0; dscores [B, H, T, T] when given.
void attention_forward(const Exec& ex, Buf out, Buf att, Buf qkv, const AttentionShape& s, Buf scratch,
                       const DropoutMask& drop = {}, Buf bias = {});
void attention_backward(const Exec& ex, Buf dqkv, Buf dout, Buf qkv, Buf att, const AttentionShape& s, Buf scratch,
                        const DropoutMask& drop = {}, Buf dscores = {});

}  // namespace dp
