// Attention on 16-bit operands (bfloat16, float16): the four products of each pass on the tensor
// cores (cublasGemmStridedBatchedEx, float32 accumulation, one rounding on store), the scores'
// scale in the product's alpha, and the bias, the mask and the softmax in float32 registers over
// the 16-bit scores — which are att itself, so no float32 [B, H, T, T] copy exists on either pass
// (the float32 path's operands' widening made two). PyTorch's explicit attention in bfloat16 rounds
// the scores likewise (q @ k.transpose(-2, -1) returns bfloat16). The layout and the order of the
// steps are attention.cu's; its float32 kernels sum in double, these in float32 (a 16-bit result
// does not need more).
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "core/cuda/check.cuh"
#include "kernels/cuda/attention_layout.cuh"
#include "kernels/cuda/attention_rows_kernels.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/dropout.hpp"

namespace dp::cuda {

namespace {

using attention_layout::heads_to_rows;
using attention_layout::rows_to_heads;
using attention_layout::split_qkv;
using attention_rows_kernels::softmax_rows;
using attention_rows_kernels::softmax_rows_backward;

int i32(int64_t v) { return static_cast<int>(v); }

// The shapes of one pass's products, over the B·H heads (column-major, as attention.cu writes them).
struct HeadProducts {
  Context& c;
  cudaDataType_t type;
  int64_t seq, hs, heads;
  // C = alpha · op(A)·op(B), each a batch of matrices `stride_*` elements apart.
  void run(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
           int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, void* out, int64_t ldc,
           int64_t stride_c) const {
    const float zero = 0.f;
    DP_CUDA_CHECK(cublasGemmStridedBatchedEx(c.handles().cublas, ta, tb, i32(m), i32(n), i32(k), &alpha, a, type,
                                             i32(lda), stride_a, b, type, i32(ldb), stride_b, &zero, out, type,
                                             i32(ldc), stride_c, i32(heads), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // scores [T, T] = alpha · x·yᵀ of two [T, hs] heads (column-major: scoresᵀ = y·xᵀ)
  void scores(float alpha, const void* x, const void* y, void* out) const {
    run(CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, hs, alpha, y, hs, seq * hs, x, hs, seq * hs, out, seq, seq * seq);
  }
  // out [T, hs] = alpha · p·x, p [T, T] (column-major: outᵀ = xᵀ·pᵀ)
  void weighted(float alpha, const void* p, const void* x, void* out) const {
    run(CUBLAS_OP_N, CUBLAS_OP_N, hs, seq, seq, alpha, x, hs, seq * hs, p, seq, seq * seq, out, hs, seq * hs);
  }
  // out [T, hs] = alpha · pᵀ·x (column-major: outᵀ = xᵀ·p)
  void weighted_transposed(float alpha, const void* p, const void* x, void* out) const {
    run(CUBLAS_OP_N, CUBLAS_OP_T, hs, seq, seq, alpha, x, hs, seq * hs, p, seq, seq * seq, out, hs, seq * hs);
  }
};

template <typename T>
void forward(Context& c, DType t, T* out, T* att, const T* qkv, const AttentionShape& s, T* scratch,
             const DropoutMask& drop, const T* bias) {
  const int64_t B = s.B, seq = s.T, H = s.H, hs = s.hs(), BTC = B * seq * s.C, BH = B * H;
  cudaStream_t st = c.handles().stream;
  T *q = scratch, *k = q + BTC, *v = k + BTC, *y = v + BTC;
  split_qkv<T><<<blocks_for(BTC), kThreads, 0, st>>>(q, k, v, qkv, B, seq, H, hs);
  DP_CUDA_CHECK_LAUNCH();
  const HeadProducts products{c, cublas_type(t), seq, hs, BH};
  products.scores(s.score_scale(), q, k, att);
  const dim3 block(32, 8);
  softmax_rows<T><<<static_cast<unsigned>((BH * seq + 7) / 8), block, 0, st>>>(att, bias, BH * seq, seq, H * seq,
                                                                               s.bias_blocks, s.causal);
  DP_CUDA_CHECK_LAUNCH();
  const T* weights = att;
  if (drop.on()) {  // the dropped probabilities after the head outputs in scratch; att keeps its own
    T* dropped = y + BTC;
    dropout_apply(c, t, dropped, att, B, H * seq * seq, drop);
    weights = dropped;
  }
  products.weighted(1.f, weights, v, y);
  heads_to_rows<T><<<blocks_for(BTC), kThreads, 0, st>>>(out, y, B, seq, H, hs, s.C, 0);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void backward(Context& c, DType t, T* dqkv, const T* dout, const T* qkv, const T* att, const AttentionShape& s,
              T* scratch, const DropoutMask& drop, T* dscores) {
  const int64_t B = s.B, seq = s.T, H = s.H, hs = s.hs(), C = s.C, BTC = B * seq * C, BH = B * H;
  cudaStream_t st = c.handles().stream;
  T *q = scratch, *k = q + BTC, *v = k + BTC, *dy = v + BTC, *dscore = dy + BTC;
  split_qkv<T><<<blocks_for(BTC), kThreads, 0, st>>>(q, k, v, qkv, B, seq, H, hs);
  DP_CUDA_CHECK_LAUNCH();
  rows_to_heads<T><<<blocks_for(BTC), kThreads, 0, st>>>(dy, dout, B, seq, H, hs);
  DP_CUDA_CHECK_LAUNCH();
  const HeadProducts products{c, cublas_type(t), seq, hs, BH};
  products.scores(1.f, dy, v, dscore);  // datt = dy·vᵀ
  const T* weights = att;
  if (drop.on()) {  // the same mask again: the dropped probabilities for dv, and datt ⊙= f
    T* dropped = dscore + BH * seq * seq;
    dropout_apply(c, t, dropped, att, B, H * seq * seq, drop);
    dropout_apply(c, t, dscore, dscore, B, H * seq * seq, drop);
    weights = dropped;
  }
  products.weighted_transposed(1.f, weights, dy, v);  // dv = attᵀ·dy, into v's slot
  const dim3 block(32, 8);
  softmax_rows_backward<T><<<static_cast<unsigned>((BH * seq + 7) / 8), block, 0, st>>>(dscore, dscores, att, BH * seq,
                                                                                        seq, s.causal);
  DP_CUDA_CHECK_LAUNCH();
  const float scale = s.score_scale();
  products.weighted(scale, dscore, k, dy);             // dq = scale · dscore·k, into dy's slot
  products.weighted_transposed(scale, dscore, q, k);   // dk = scale · dscoreᵀ·q, into k's slot
  heads_to_rows<T><<<blocks_for(BTC), kThreads, 0, st>>>(dqkv, dy, B, seq, H, hs, 3 * C, 0);
  DP_CUDA_CHECK_LAUNCH();
  heads_to_rows<T><<<blocks_for(BTC), kThreads, 0, st>>>(dqkv, k, B, seq, H, hs, 3 * C, C);
  DP_CUDA_CHECK_LAUNCH();
  heads_to_rows<T><<<blocks_for(BTC), kThreads, 0, st>>>(dqkv, v, B, seq, H, hs, 3 * C, 2 * C);
  DP_CUDA_CHECK_LAUNCH();
}

// f(T{}) for the 16-bit types only: float32 operands take attention.cu's kernels.
template <typename F>
void with_16bit_type(DType t, const char* what, F&& f) {
  if (t == DType::F32) throw RuntimeError(std::string(what) + ": the 16-bit kernels were handed float32 operands");
  with_float_type(t, what, std::forward<F>(f));
}

}  // namespace

void attention_forward(Context& c, DType t, void* out, void* att, const void* qkv, const AttentionShape& s,
                       void* scratch, const DropoutMask& drop, const void* bias) {
  if (s.B * s.T * s.C == 0) return;
  with_16bit_type(t, "attention_forward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>)
      forward(c, t, static_cast<T*>(out), static_cast<T*>(att), static_cast<const T*>(qkv), s, static_cast<T*>(scratch),
              drop, static_cast<const T*>(bias));
  });
}

void attention_backward(Context& c, DType t, void* dqkv, const void* dout, const void* qkv, const void* att,
                        const AttentionShape& s, void* scratch, const DropoutMask& drop, void* dscores) {
  if (s.B * s.T * s.C == 0) return;
  with_16bit_type(t, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>)
      backward(c, t, static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
               static_cast<const T*>(att), s, static_cast<T*>(scratch), drop, static_cast<T*>(dscores));
  });
}

}  // namespace dp::cuda
