// The 16-bit explicit attention's softmax kernels over its scores (attention_16bit.cu launches
// them), in a header of their own so that tests/emulated runs them on the CPU too
// (warp_emulation.hpp). The includer provides the shuffles (half.cuh comes with it under nvcc).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include "kernels/cuda/half.cuh"  // load_float, store_as (tests/emulated: warp_emulation.hpp's)
#endif

namespace dp::cuda::attention_rows_kernels {

// The running (max, sum of exp(x − max)) of two parts of a row, combined; an empty part is
// (−inf, 0).
__device__ inline void combine(float& mx, float& sum, float other_mx, float other_sum) {
  const float m = fmaxf(mx, other_mx);
  const float mine = mx == -INFINITY ? 0.f : sum * expf(mx - m);
  const float theirs = other_mx == -INFINITY ? 0.f : other_sum * expf(other_mx - m);
  mx = m, sum = mine + theirs;
}

// In place on att [B·H·T rows of T], which holds the scaled scores: row r (query t of its head)
// keeps keys <= t (causal; else all), adds its bias row if there is one (block b % blocks of
// [blocks, H, T, T]), softmax over them in one read (online: the max and the sum together), zeros
// after. A warp a row.
template <typename T>
__global__ void softmax_rows(T* att, const T* bias, int64_t rows, int64_t seq, int64_t heads_rows, int64_t blocks,
                             bool causal) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const int64_t last = causal ? r % seq : seq - 1;
  T* row = att + r * seq;
  const T* brow = bias ? bias + ((r / heads_rows % blocks) * heads_rows + r % heads_rows) * seq : nullptr;
  float mx = -INFINITY, sum = 0.f;
  for (int64_t j = threadIdx.x; j <= last; j += 32) {
    const float v = load_float(row[j]) + (brow ? load_float(brow[j]) : 0.f);
    if (v == -INFINITY) continue;  // adds nothing (and exp(−inf − −inf) would be NaN)
    if (v > mx) {  // a new max: the sum so far rescaled to it
      sum = mx == -INFINITY ? 0.f : sum * expf(mx - v);
      mx = v;
    }
    sum += expf(v - mx);
  }
  for (int off = 16; off > 0; off /= 2) {
    const float other_mx = __shfl_xor_sync(0xffffffffu, mx, off), other_sum = __shfl_xor_sync(0xffffffffu, sum, off);
    combine(mx, sum, other_mx, other_sum);
  }
  const float inv = 1.f / sum;
  for (int64_t j = threadIdx.x; j < seq; j += 32) {
    float p = 0.f;
    if (j <= last) p = expf(load_float(row[j]) + (brow ? load_float(brow[j]) : 0.f) - mx) * inv;
    row[j] = store_as<T>(p);
  }
}

// d (the probabilities' gradient in, the scores' out) = att ⊙ (d − Σ d⊙att) per row, masked
// entries 0; `kept`, when given, the same (the biased scores' gradient). The scale is the next
// products' alpha.
template <typename T>
__global__ void softmax_rows_backward(T* d, T* kept, const T* att, int64_t rows, int64_t seq, bool causal) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const int64_t last = causal ? r % seq : seq - 1;
  T* dr = d + r * seq;
  const T* ar = att + r * seq;
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j <= last; j += 32) dot += load_float(dr[j]) * load_float(ar[j]);
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  for (int64_t j = threadIdx.x; j < seq; j += 32) {
    const T g = store_as<T>(j <= last ? load_float(ar[j]) * (load_float(dr[j]) - dot) : 0.f);
    if (kept) kept[r * seq + j] = g;
    dr[j] = g;
  }
}

}  // namespace dp::cuda::attention_rows_kernels
