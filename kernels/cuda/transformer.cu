// LayerNorm (a warp per row; its backward in one pass over the rows: dx and each part's dγ and dβ,
// the parts added in order, kernels/layernorm_parts.hpp), exact GELU, and the embedding lookup.
// Float32 arithmetic in registers (no fp64: a GPU's double rate is a fraction of its float one),
// on every storage type (half.cuh): 16-bit activations and parameters are loaded, computed as the
// float32 kernel does and rounded once on store — bit for bit what the operands' widening around
// the float32 kernel gives, without its copies; LayerNorm's mean and rstd stay float32. The CPU
// reference sums in double: the GPU cases hold these within the float32 tolerance of it.
#include <algorithm>
#include <string>

#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/layernorm_parts.hpp"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/id_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/unrolled.cuh"
#include "kernels/ops/transformer.hpp"

namespace dp::cuda {

namespace {

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

constexpr float kInvSqrt2 = 0.70710678118654752440f, kInvSqrt2Pi = 0.39894228040143267794f;

// x·Φ(x), as the CPU reference's float32 formula; unrolled.cuh's loads in flight.
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  unrolled_map<int64_t, 1>(out, {in}, n, [](const float(&v)[1], int64_t) {
    return 0.5f * v[0] * (1.f + erff(v[0] * kInvSqrt2));
  });
}

// Φ(x) + x·φ(x)
template <typename T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, int64_t n) {
  unrolled_map<int64_t, 2>(din, {dout, in}, n, [](const float(&v)[2], int64_t) {
    const float x = v[1], cdf = 0.5f * (1.f + erff(x * kInvSqrt2)), pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return v[0] * (cdf + x * pdf);
  });
}

// The one-pass kernel with the fewest columns a lane that hold C (a row's registers cost occupancy).
template <typename T, int kPerLane = 4>
void launch_layernorm_one_pass(cudaStream_t stream, T* din, double* part_dg, double* part_db, const T* dout,
                               const T* in, const T* gamma, const float* mean, const float* rstd, int64_t rows,
                               int64_t C, int64_t parts) {
  if constexpr (kPerLane < kMaxPerLane) {
    if (C > int64_t{32} * kPerLane)
      return launch_layernorm_one_pass<T, kPerLane + (kPerLane < 16 ? kPerLane : 8)>(
          stream, din, part_dg, part_db, dout, in, gamma, mean, rstd, rows, C, parts);
  }
  layernorm_backward_one_pass_kernel<T, kPerLane><<<static_cast<unsigned>(parts), dim3(kPartCols, kPartRows), 0, stream>>>(
      din, part_dg, part_db, dout, in, gamma, mean, rstd, rows, C, parts);
}

template <typename T>
void launch_layernorm_forward(Context& c, T* out, float* mean, float* rstd, const T* in, const T* gamma, const T* beta,
                              int64_t rows, int64_t C, float eps) {
  if (rows == 0) return;
  const dim3 block(32, 8);
  layernorm_forward_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), block, 0, c.handles().stream>>>(
      out, mean, rstd, in, gamma, beta, rows, C, eps);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_layernorm_backward(Context& c, ScratchMemory& alloc, T* din, T* dgamma, T* dbeta, const T* dout,
                               const T* in, const T* gamma, const float* mean, const float* rstd, int64_t rows,
                               int64_t C) {
  if (C == 0) return;
  const int64_t parts = layernorm_parts::parts_for(rows);
  const ScopedBlock scratch(alloc, layernorm_parts::scratch_bytes(rows, C));
  double *part_dg = scratch.at<double>(), *part_db = part_dg + parts * C;
  const cudaStream_t stream = c.handles().stream;
  if (C <= int64_t{32} * kMaxPerLane) {
    launch_layernorm_one_pass(stream, din, part_dg, part_db, dout, in, gamma, mean, rstd, rows, C, parts);
    DP_CUDA_CHECK_LAUNCH();
  } else {
    if (din && rows > 0) {
      layernorm_dx_kernel<T><<<static_cast<unsigned>((rows + kPartRows - 1) / kPartRows), dim3(32, kPartRows), 0,
                               stream>>>(din, dout, in, gamma, mean, rstd, rows, C);
      DP_CUDA_CHECK_LAUNCH();
    }
    const dim3 grid(static_cast<unsigned>((C + kPartCols - 1) / kPartCols), static_cast<unsigned>(parts));
    layernorm_dparams_parts_kernel<T><<<grid, dim3(kPartCols, kPartRows), 0, stream>>>(part_dg, part_db, dout, in,
                                                                                        mean, rstd, rows, C, parts);
    DP_CUDA_CHECK_LAUNCH();
  }
  layernorm_dparams_sum_kernel<T><<<static_cast<unsigned>((C + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      dgamma, dbeta, part_dg, part_db, C, parts);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_gelu_forward(Context& c, T* out, const T* in, int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<T><<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(out, in, n);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_gelu_backward(Context& c, T* din, const T* dout, const T* in, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<T><<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(din, dout, in, n);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* ids, const T* table, int64_t rows, int64_t V,
                                         int64_t C, unsigned long long* fault) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < rows * C; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / C, id = ids[r];
    if (id < 0 || id >= V) {
      if (k % C == 0) report_bad_id(fault, r, id, V);
      out[k] = store_as<T>(0.f);
      continue;
    }
    out[k] = table[id * C + k % C];
  }
}

__global__ void positions_kernel(int32_t* ids, int64_t T) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < T; t += int64_t{gridDim.x} * blockDim.x)
    ids[t] = static_cast<int32_t>(t);
}

}  // namespace

void layernorm_forward(Context& c, float* out, float* mean, float* rstd, const float* in, const float* gamma,
                       const float* beta, int64_t rows, int64_t C, float eps) {
  launch_layernorm_forward(c, out, mean, rstd, in, gamma, beta, rows, C, eps);
}

void layernorm_forward(Context& c, DType t, void* out, float* mean, float* rstd, const void* in, const void* gamma,
                       const void* beta, int64_t rows, int64_t C, float eps) {
  with_float_type(t, "layernorm_forward", [&](auto v) {
    using T = decltype(v);
    launch_layernorm_forward(c, static_cast<T*>(out), mean, rstd, static_cast<const T*>(in),
                             static_cast<const T*>(gamma), static_cast<const T*>(beta), rows, C, eps);
  });
}

void layernorm_backward(Context& c, ScratchMemory& alloc, float* din, float* dgamma, float* dbeta, const float* dout,
                        const float* in, const float* gamma, const float* mean, const float* rstd, int64_t rows,
                        int64_t C) {
  launch_layernorm_backward(c, alloc, din, dgamma, dbeta, dout, in, gamma, mean, rstd, rows, C);
}

void layernorm_backward(Context& c, ScratchMemory& alloc, DType t, void* din, void* dgamma, void* dbeta,
                        const void* dout, const void* in, const void* gamma, const float* mean, const float* rstd,
                        int64_t rows, int64_t C) {
  with_float_type(t, "layernorm_backward", [&](auto v) {
    using T = decltype(v);
    launch_layernorm_backward(c, alloc, static_cast<T*>(din), static_cast<T*>(dgamma), static_cast<T*>(dbeta),
                              static_cast<const T*>(dout), static_cast<const T*>(in), static_cast<const T*>(gamma),
                              mean, rstd, rows, C);
  });
}

void gelu_forward(Context& c, float* out, const float* in, int64_t n) { launch_gelu_forward(c, out, in, n); }

void gelu_forward(Context& c, DType t, void* out, const void* in, int64_t n) {
  with_float_type(t, "gelu_forward", [&](auto v) {
    using T = decltype(v);
    launch_gelu_forward(c, static_cast<T*>(out), static_cast<const T*>(in), n);
  });
}

void gelu_backward(Context& c, float* din, const float* dout, const float* in, int64_t n) {
  launch_gelu_backward(c, din, dout, in, n);
}

void gelu_backward(Context& c, DType t, void* din, const void* dout, const void* in, int64_t n) {
  with_float_type(t, "gelu_backward", [&](auto v) {
    using T = decltype(v);
    launch_gelu_backward(c, static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(in), n);
  });
}

void embedding_forward(Context& c, float* out, const int32_t* ids, const float* table, int64_t rows, int64_t V,
                       int64_t C) {
  embedding_forward(c, DType::F32, out, ids, table, rows, V, C);
}

void embedding_forward(Context& c, DType t, void* out, const int32_t* ids, const void* table, int64_t rows, int64_t V,
                       int64_t C) {
  if (rows * C == 0) return;
  with_float_type(t, "embedding_forward", [&](auto v) {
    using T = decltype(v);
    embedding_forward_kernel<T><<<blocks_for(rows * C), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(out), ids, static_cast<const T*>(table), rows, V, C, c.handles().data_fault);
  });
  DP_CUDA_CHECK_LAUNCH();
  after_id_check(c);
}

void positions(Context& c, int32_t* ids, int64_t T) {
  if (T == 0) return;
  positions_kernel<<<blocks_for(T), kThreads, 0, c.handles().stream>>>(ids, T);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
