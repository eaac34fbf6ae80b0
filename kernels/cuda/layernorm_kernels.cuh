// LayerNorm's kernels (transformer.cu has what they compute and launches them), in a header of
// their own so that tests/emulated runs them on the CPU too (warp_emulation.hpp): their indexing,
// the parts and the warps' tree checked against the CPU reference without a GPU. The includer
// provides CUDA's intrinsics (half.cuh comes with it under nvcc).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include "kernels/cuda/half.cuh"  // load_float, store_as (tests/emulated: warp_emulation.hpp's)
#endif
#include <type_traits>

#include "kernels/layernorm_parts.hpp"

namespace dp::cuda::layernorm_kernels {

// The butterfly: every lane ends with the same sum, added in the same order.
__device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in, const T* gamma, const T* beta,
                                         int64_t rows, int64_t C, float eps) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const T* x = in + r * C;
  float s = 0;
  for (int64_t i = threadIdx.x; i < C; i += 32) s += load_float(x[i]);
  const float m = warp_sum(s) / static_cast<float>(C);
  float sq = 0;
  for (int64_t i = threadIdx.x; i < C; i += 32) {
    const float d = load_float(x[i]) - m;
    sq += d * d;
  }
  const float rs = 1.f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) mean[r] = m, rstd[r] = rs;
  for (int64_t i = threadIdx.x; i < C; i += 32)
    out[r * C + i] = store_as<T>((load_float(x[i]) - m) * rs * load_float(gamma[i]) + (beta ? load_float(beta[i]) : 0.f));
}

constexpr int kPartCols = 32, kPartRows = 8;  // a block: 32 columns (a warp reads a row's 128 bytes), 8 rows at a time
constexpr int kMaxPerLane = 32;               // the one-pass backward's widest row: 32 columns a lane, C ≤ 1,024

// The backward in one pass over a part's rows (layernorm_parts.hpp), for C ≤ 32·kPerLane: block p
// holds the part; warp w takes its rows w, w + 8, …, holding a row in registers (kPerLane columns a
// lane) for dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·γ, and adding dy·x̂ and dy to its
// lanes' dγ and dβ sums; the eight warps' sums are then added in a fixed tree and written as
// part_dg[p][col], part_db[p][col] — the same order as the parts kernel below, which wider rows take.
template <typename T, int kPerLane>
__global__ void __launch_bounds__(kPartCols* kPartRows)
    layernorm_backward_one_pass_kernel(T* din, double* part_dg, double* part_db, const T* dout, const T* in,
                                       const T* gamma, const float* mean, const float* rstd, int64_t rows, int64_t C,
                                       int64_t parts) {
  constexpr int kChunk = 8;  // columns a lane hands to the tree at a time: 2 × 8 KiB of shared memory
  __shared__ float tree_g[kPartRows][kChunk * kPartCols], tree_b[kPartRows][kChunk * kPartCols];
  const int lane = threadIdx.x, w = threadIdx.y;
  const int64_t p = blockIdx.x;
  const int64_t begin = layernorm_parts::part_begin(rows, p, parts), end = layernorm_parts::part_begin(rows, p + 1, parts);
  float gam[kPerLane], dg[kPerLane], db[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const int64_t i = lane + int64_t{32} * k;
    gam[k] = i < C ? load_float(gamma[i]) : 0.f, dg[k] = 0.f, db[k] = 0.f;
  }
  for (int64_t r = begin + w; r < end; r += kPartRows) {
    const T *x = in + r * C, *dy = dout + r * C;
    const float m = mean[r], rs = rstd[r];
    float xhat[kPerLane], d[kPerLane], sg = 0.f, sgx = 0.f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t i = lane + int64_t{32} * k;
      d[k] = i < C ? load_float(dy[i]) : 0.f;
      xhat[k] = i < C ? (load_float(x[i]) - m) * rs : 0.f;
      const float g = d[k] * gam[k];
      sg += g, sgx += g * xhat[k];
    }
    if (din) {
      sg = warp_sum(sg) / static_cast<float>(C), sgx = warp_sum(sgx) / static_cast<float>(C);
#pragma unroll
      for (int k = 0; k < kPerLane; ++k)
        if (const int64_t i = lane + int64_t{32} * k; i < C)
          din[r * C + i] = store_as<T>(rs * (d[k] * gam[k] - sg - xhat[k] * sgx));
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) dg[k] += d[k] * xhat[k], db[k] += d[k];
  }
#pragma unroll
  for (int k0 = 0; k0 < kPerLane; k0 += kChunk) {
#pragma unroll
    for (int j = 0; j < kChunk && k0 + j < kPerLane; ++j)
      tree_g[w][j * kPartCols + lane] = dg[k0 + j], tree_b[w][j * kPartCols + lane] = db[k0 + j];
    __syncthreads();
    for (int half = kPartRows / 2; half > 0; half /= 2) {
      if (w < half)
        for (int j = 0; j < kChunk && k0 + j < kPerLane; ++j) {
          tree_g[w][j * kPartCols + lane] += tree_g[w + half][j * kPartCols + lane];
          tree_b[w][j * kPartCols + lane] += tree_b[w + half][j * kPartCols + lane];
        }
      __syncthreads();
    }
    if (w == 0)
      for (int j = 0; j < kChunk && k0 + j < kPerLane; ++j)
        if (const int64_t i = lane + int64_t{32} * (k0 + j); i < C)
          part_dg[p * C + i] = tree_g[0][j * kPartCols + lane], part_db[p * C + i] = tree_b[0][j * kPartCols + lane];
    __syncthreads();  // the tree's memory is the next chunk's
  }
}

// Rows wider than the one-pass kernel holds: dx a warp a row (reading the row twice) ...
template <typename T>
__global__ void layernorm_dx_kernel(T* din, const T* dout, const T* in, const T* gamma, const float* mean,
                                    const float* rstd, int64_t rows, int64_t C) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const T *x = in + r * C, *dy = dout + r * C;
  const float m = mean[r], rs = rstd[r];
  float sg = 0, sgx = 0;
  for (int64_t i = threadIdx.x; i < C; i += 32) {
    const float xhat = (load_float(x[i]) - m) * rs, g = load_float(dy[i]) * load_float(gamma[i]);
    sg += g, sgx += g * xhat;
  }
  sg = warp_sum(sg) / static_cast<float>(C), sgx = warp_sum(sgx) / static_cast<float>(C);
  for (int64_t i = threadIdx.x; i < C; i += 32) {
    const float xhat = (load_float(x[i]) - m) * rs, g = load_float(dy[i]) * load_float(gamma[i]);
    din[r * C + i] = store_as<T>(rs * (g - sg - xhat * sgx));
  }
}

// ... and block (column chunk, part p) sums the part's rows for 32 columns, 8 rows at a time, the
// eight sums added in the one-pass kernel's tree; written to part_dg[p][col], part_db[p][col].
template <typename T>
__global__ void layernorm_dparams_parts_kernel(double* part_dg, double* part_db, const T* dout, const T* in,
                                               const float* mean, const float* rstd, int64_t rows, int64_t C,
                                               int64_t parts) {
  __shared__ float sg[kPartRows][kPartCols + 1], sb[kPartRows][kPartCols + 1];  // +1: no bank conflicts
  const int64_t col = blockIdx.x * int64_t{kPartCols} + threadIdx.x, p = blockIdx.y;
  const int64_t begin = layernorm_parts::part_begin(rows, p, parts), end = layernorm_parts::part_begin(rows, p + 1, parts);
  float dg = 0, db = 0;
  if (col < C)
    for (int64_t r = begin + threadIdx.y; r < end; r += kPartRows) {
      const float dy = load_float(dout[r * C + col]), xhat = (load_float(in[r * C + col]) - mean[r]) * rstd[r];
      dg += dy * xhat, db += dy;
    }
  sg[threadIdx.y][threadIdx.x] = dg, sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  for (int half = kPartRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      sg[threadIdx.y][threadIdx.x] += sg[threadIdx.y + half][threadIdx.x];
      sb[threadIdx.y][threadIdx.x] += sb[threadIdx.y + half][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && col < C) part_dg[p * C + col] = sg[0][threadIdx.x], part_db[p * C + col] = sb[0][threadIdx.x];
}

// Each column's parts added in order (in double: up to 256 parts' sums, one add each).
template <typename T>
__global__ void layernorm_dparams_sum_kernel(T* dgamma, T* dbeta, const double* part_dg, const double* part_db,
                                             int64_t C, int64_t parts) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= C) return;
  double dg = 0, db = 0;
  for (int64_t p = 0; p < parts; ++p) dg += part_dg[p * C + i], db += part_db[p * C + i];
  dgamma[i] = store_as<T>(static_cast<float>(dg));
  if (dbeta) dbeta[i] = store_as<T>(static_cast<float>(db));
}

// f(std::integral_constant<int, kPerLane>{}) with the one-pass kernel's fewest columns a lane that
// hold C ≤ 32·kMaxPerLane (a row's registers cost occupancy): 4, 8, 16, 24 or 32.
template <int kPerLane = 4, typename F>
void with_lanes_for(int64_t C, F&& f) {
  if constexpr (kPerLane < kMaxPerLane) {
    if (C > int64_t{32} * kPerLane)
      return with_lanes_for<kPerLane + (kPerLane < 16 ? kPerLane : 8)>(C, static_cast<F&&>(f));
  }
  f(std::integral_constant<int, kPerLane>{});
}

}  // namespace dp::cuda::layernorm_kernels
