// Attention on float32 operands with cuBLAS strided-batched GEMMs over the B·H heads (llm.c's
// layout, attention_layout.cuh): q, k, v are first permuted from qkv [B, T, 3C] to [B·H, T, hs] in
// the caller's scratch; a warp per row does the masked softmax and its backward. cuBLAS is
// column-major: each row-major product below is written as its transpose (see
// kernels/cuda/linear.cu). With dropout, the dropped probabilities are formed in scratch by
// dropout's own kernel (kernels/cuda/dropout.cu), over each sample's [H, T, T] probabilities as the
// CPU reference draws them. 16-bit operands: attention_16bit.cu.
#include <algorithm>
#include <cmath>

#include "core/cuda/check.cuh"
#include "kernels/cuda/attention_layout.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/dropout.hpp"

namespace dp::cuda {

namespace {

using attention_layout::heads_to_rows;
using attention_layout::rows_to_heads;
using attention_layout::split_qkv;

// In place on att [B·H·T rows of T]: row t keeps columns <= t (causal; else all), softmax over
// them, zeros after.
__global__ void causal_softmax_kernel(float* att, int64_t rows, int64_t T, bool causal) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const int64_t t = causal ? r % T : T - 1;
  float* row = att + r * T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += 32) mx = fmaxf(mx, row[j]);
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= t; j += 32) sum += exp(static_cast<double>(row[j] - mx));
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int64_t j = threadIdx.x; j < T; j += 32)
    row[j] = j <= t ? static_cast<float>(exp(static_cast<double>(row[j] - mx)) / sum) : 0.f;
}

// att [B, H, T, T] += bias block b % blocks ([blocks, H, T, T]), before the softmax.
__global__ void add_score_bias_kernel(float* att, const float* bias, int64_t n, int64_t per_sample, int64_t blocks) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    att[i] += bias[(i / per_sample % blocks) * per_sample + i % per_sample];
}

// d (datt in, dscore out) = att ⊙ (datt − Σ datt⊙att) · scale, masked entries 0; `kept`, when
// given, the same before the scale (the biased scores' gradient).
__global__ void causal_softmax_backward_kernel(float* d, float* kept, const float* att, int64_t rows, int64_t T,
                                               float scale, bool causal) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const int64_t t = causal ? r % T : T - 1;
  float* dr = d + r * T;
  const float* ar = att + r * T;
  double dot = 0;
  for (int64_t j = threadIdx.x; j <= t; j += 32) dot += double(dr[j]) * ar[j];
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  for (int64_t j = threadIdx.x; j < T; j += 32) {
    const float g = j <= t ? static_cast<float>(ar[j] * (dr[j] - dot)) : 0.f;
    if (kept) kept[r * T + j] = g;
    dr[j] = g * scale;
  }
}

int i32(int64_t v) { return static_cast<int>(v); }

}  // namespace

void attention_forward(Context& c, float* out, float* att, const float* qkv, const AttentionShape& s, float* scratch,
                       const DropoutMask& drop, const float* bias) {
  const int64_t B = s.B, T = s.T, H = s.H, hs = s.hs(), BTC = B * T * s.C, BH = B * H;
  if (BTC == 0) return;
  cudaStream_t st = c.handles().stream;
  cublasHandle_t h = c.handles().cublas;
  float *q = scratch, *k = q + BTC, *v = k + BTC, *y = v + BTC;
  split_qkv<float><<<blocks_for(BTC), kThreads, 0, st>>>(q, k, v, qkv, B, T, H, hs);
  DP_CUDA_CHECK_LAUNCH();
  const float scale = s.score_scale(), one = 1.f, zero = 0.f;
  // att = scale · q·kᵀ   (column-major: attᵀ = k·qᵀ)
  DP_CUDA_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, i32(T), i32(T), i32(hs), &scale, k, i32(hs),
                                          T * hs, q, i32(hs), T * hs, &zero, att, i32(T), T * T, i32(BH)));
  if (bias) {
    add_score_bias_kernel<<<blocks_for(BH * T * T), kThreads, 0, st>>>(att, bias, BH * T * T, H * T * T,
                                                                        s.bias_blocks);
    DP_CUDA_CHECK_LAUNCH();
  }
  const dim3 block(32, 8);
  causal_softmax_kernel<<<static_cast<unsigned>((BH * T + 7) / 8), block, 0, st>>>(att, BH * T, T, s.causal);
  DP_CUDA_CHECK_LAUNCH();
  const float* weights = att;
  if (drop.on()) {  // the dropped probabilities after the head outputs in scratch; att keeps its own
    float* dropped = y + BTC;
    dropout_apply(c, dropped, att, B, H * T * T, drop);
    weights = dropped;
  }
  // y = att·v   (column-major: yᵀ = vᵀ·attᵀ)
  DP_CUDA_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, i32(hs), i32(T), i32(T), &one, v, i32(hs),
                                          T * hs, weights, i32(T), T * T, &zero, y, i32(hs), T * hs, i32(BH)));
  heads_to_rows<float><<<blocks_for(BTC), kThreads, 0, st>>>(out, y, B, T, H, hs, s.C, 0);
  DP_CUDA_CHECK_LAUNCH();
}

void attention_backward(Context& c, float* dqkv, const float* dout, const float* qkv, const float* att,
                        const AttentionShape& s, float* scratch, const DropoutMask& drop, float* dscores) {
  const int64_t B = s.B, T = s.T, H = s.H, hs = s.hs(), C = s.C, BTC = B * T * C, BH = B * H;
  if (BTC == 0) return;
  cudaStream_t st = c.handles().stream;
  cublasHandle_t h = c.handles().cublas;
  float *q = scratch, *k = q + BTC, *v = k + BTC, *dy = v + BTC, *dscore = dy + BTC;
  split_qkv<float><<<blocks_for(BTC), kThreads, 0, st>>>(q, k, v, qkv, B, T, H, hs);
  DP_CUDA_CHECK_LAUNCH();
  rows_to_heads<float><<<blocks_for(BTC), kThreads, 0, st>>>(dy, dout, B, T, H, hs);
  DP_CUDA_CHECK_LAUNCH();
  const float scale = s.score_scale(), one = 1.f, zero = 0.f;
  // datt = dy·vᵀ
  DP_CUDA_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, i32(T), i32(T), i32(hs), &one, v, i32(hs),
                                          T * hs, dy, i32(hs), T * hs, &zero, dscore, i32(T), T * T, i32(BH)));
  const float* weights = att;
  if (drop.on()) {  // the same mask again: the dropped probabilities for dv, and datt ⊙= f
    float* dropped = dscore + BH * T * T;
    dropout_apply(c, dropped, att, B, H * T * T, drop);
    dropout_apply(c, dscore, dscore, B, H * T * T, drop);
    weights = dropped;
  }
  // dv = attᵀ·dy (att dropped, as forward used it), into v's slot (v is no longer needed)
  DP_CUDA_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, i32(hs), i32(T), i32(T), &one, dy, i32(hs),
                                          T * hs, weights, i32(T), T * T, &zero, v, i32(hs), T * hs, i32(BH)));
  const dim3 block(32, 8);
  causal_softmax_backward_kernel<<<static_cast<unsigned>((BH * T + 7) / 8), block, 0, st>>>(
      dscore, dscores, att, BH * T, T, scale, s.causal);
  DP_CUDA_CHECK_LAUNCH();
  // dq = dscore·k, into dy's slot; then dk = dscoreᵀ·q, into k's slot
  DP_CUDA_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, i32(hs), i32(T), i32(T), &one, k, i32(hs),
                                          T * hs, dscore, i32(T), T * T, &zero, dy, i32(hs), T * hs, i32(BH)));
  DP_CUDA_CHECK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, i32(hs), i32(T), i32(T), &one, q, i32(hs),
                                          T * hs, dscore, i32(T), T * T, &zero, k, i32(hs), T * hs, i32(BH)));
  heads_to_rows<float><<<blocks_for(BTC), kThreads, 0, st>>>(dqkv, dy, B, T, H, hs, 3 * C, 0);
  DP_CUDA_CHECK_LAUNCH();
  heads_to_rows<float><<<blocks_for(BTC), kThreads, 0, st>>>(dqkv, k, B, T, H, hs, 3 * C, C);
  DP_CUDA_CHECK_LAUNCH();
  heads_to_rows<float><<<blocks_for(BTC), kThreads, 0, st>>>(dqkv, v, B, T, H, hs, 3 * C, 2 * C);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
