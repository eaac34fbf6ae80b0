// The heads' layout for attention's batched products (llm.c's): q, k, v out of the packed qkv
// [B, T, 3C] into [B·H, T, hs] each, and head outputs or gradients between [B·H, T, hs] and rows
// of C. Templates over the storage type (half.cuh): the float32 and 16-bit kernels move the same
// elements.
#pragma once
#include <cstdint>

namespace dp::cuda::attention_layout {

// qkv [B, T, 3, H, hs] -> q, k, v [B, H, T, hs]
template <typename T>
__global__ void split_qkv(T* q, T* k, T* v, const T* qkv, int64_t B, int64_t seq, int64_t H, int64_t hs) {
  const int64_t n = B * H * seq * hs, C = H * hs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % hs, t = i / hs % seq, h = i / (hs * seq) % H, b = i / (hs * seq * H);
    const int64_t src = (b * seq + t) * 3 * C + h * hs + d;
    q[i] = qkv[src];
    k[i] = qkv[src + C];
    v[i] = qkv[src + 2 * C];
  }
}

// [B, H, T, hs] -> [B, T, C] (rows of C with stride `ld`, starting at column `col`)
template <typename T>
__global__ void heads_to_rows(T* rows, const T* heads, int64_t B, int64_t seq, int64_t H, int64_t hs, int64_t ld,
                              int64_t col) {
  const int64_t n = B * H * seq * hs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % hs, t = i / hs % seq, h = i / (hs * seq) % H, b = i / (hs * seq * H);
    rows[(b * seq + t) * ld + col + h * hs + d] = heads[i];
  }
}

// [B, T, C] -> [B, H, T, hs]
template <typename T>
__global__ void rows_to_heads(T* heads, const T* rows, int64_t B, int64_t seq, int64_t H, int64_t hs) {
  const int64_t n = B * H * seq * hs, C = H * hs;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % hs, t = i / hs % seq, h = i / (hs * seq) % H, b = i / (hs * seq * H);
    heads[i] = rows[(b * seq + t) * C + h * hs + d];
  }
}

}  // namespace dp::cuda::attention_layout
