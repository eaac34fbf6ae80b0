// LayerNorm (a warp per row, sums in double, like the CPU reference; dγ and dβ summed over parts of
// the rows, kernels/layernorm_parts.hpp), exact GELU, and the embedding lookup. LayerNorm and GELU
// are templates over the storage type (half.cuh): on 16-bit activations and parameters they load
// the values, compute as the float32 kernel does and round once on store — bit for bit what the
// operands' widening around the float32 kernel gives, without its copies; LayerNorm's mean and
// rstd stay float32 (its backward, a sort, is in embedding_backward.cu: CUB stays out of this file).
#include <algorithm>
#include <string>

#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/layernorm_parts.hpp"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/id_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/transformer.hpp"

namespace dp::cuda {

namespace {


__device__ double warp_sum(double v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* in, const T* gamma, const T* beta,
                                         int64_t rows, int64_t C, float eps) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const T* x = in + r * C;
  double s = 0;
  for (int64_t i = threadIdx.x; i < C; i += 32) s += load_float(x[i]);
  const double m = warp_sum(s) / static_cast<double>(C);
  double sq = 0;
  for (int64_t i = threadIdx.x; i < C; i += 32) sq += (load_float(x[i]) - m) * (load_float(x[i]) - m);
  const double rs = 1.0 / sqrt(warp_sum(sq) / static_cast<double>(C) + eps);
  if (threadIdx.x == 0) mean[r] = static_cast<float>(m), rstd[r] = static_cast<float>(rs);
  for (int64_t i = threadIdx.x; i < C; i += 32)
    out[r * C + i] = store_as<T>(static_cast<float>((load_float(x[i]) - m) * rs) * load_float(gamma[i]) +
                                 (beta ? load_float(beta[i]) : 0.f));
}

template <typename T>
__global__ void layernorm_dx_kernel(T* din, const T* dout, const T* in, const T* gamma, const float* mean,
                                    const float* rstd, int64_t rows, int64_t C) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const T *x = in + r * C, *dy = dout + r * C;
  double sg = 0, sgx = 0;
  for (int64_t i = threadIdx.x; i < C; i += 32) {
    const double xhat = (load_float(x[i]) - mean[r]) * rstd[r], g = double(load_float(dy[i])) * load_float(gamma[i]);
    sg += g;
    sgx += g * xhat;
  }
  sg = warp_sum(sg) / static_cast<double>(C);
  sgx = warp_sum(sgx) / static_cast<double>(C);
  for (int64_t i = threadIdx.x; i < C; i += 32) {
    const double xhat = (load_float(x[i]) - mean[r]) * rstd[r], g = double(load_float(dy[i])) * load_float(gamma[i]);
    din[r * C + i] = store_as<T>(static_cast<float>(rstd[r] * (g - sg - xhat * sgx)));
  }
}

constexpr int kPartCols = 32, kPartRows = 8;  // a block: 32 columns (a warp reads a row's 128 bytes), 8 rows at a time

// Block (column chunk, part p): the part's rows summed for 32 columns, 8 rows at a time, the eight
// sums added in a fixed tree; written to part_dg[p][col], part_db[p][col].
template <typename T>
__global__ void layernorm_dparams_parts_kernel(double* part_dg, double* part_db, const T* dout, const T* in,
                                               const float* mean, const float* rstd, int64_t rows, int64_t C,
                                               int64_t parts) {
  __shared__ double sg[kPartRows][kPartCols + 1], sb[kPartRows][kPartCols + 1];  // +1: no bank conflicts
  const int64_t col = blockIdx.x * int64_t{kPartCols} + threadIdx.x, p = blockIdx.y;
  const int64_t begin = layernorm_parts::part_begin(rows, p, parts), end = layernorm_parts::part_begin(rows, p + 1, parts);
  double dg = 0, db = 0;
  if (col < C)
    for (int64_t r = begin + threadIdx.y; r < end; r += kPartRows) {
      const double dy = load_float(dout[r * C + col]);
      dg += dy * (load_float(in[r * C + col]) - mean[r]) * rstd[r];
      db += dy;
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

// Each column's parts added in order.
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

template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = load_float(in[i]);
    out[i] = store_as<T>(static_cast<float>(0.5 * x * (1.0 + erf(x * 0.70710678118654752440))));
  }
}

template <typename T>
__global__ void gelu_backward_kernel(T* din, const T* dout, const T* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double x = load_float(in[i]);
    const double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440)), pdf = 0.39894228040143267794 * exp(-0.5 * x * x);
    din[i] = store_as<T>(static_cast<float>(load_float(dout[i]) * (cdf + x * pdf)));
  }
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
  if (din && rows > 0) {
    const dim3 block(32, 8);
    layernorm_dx_kernel<T><<<static_cast<unsigned>((rows + 7) / 8), block, 0, c.handles().stream>>>(din, dout, in, gamma,
                                                                                                     mean, rstd, rows, C);
    DP_CUDA_CHECK_LAUNCH();
  }
  if (C == 0) return;
  const int64_t parts = layernorm_parts::parts_for(rows);
  const ScopedBlock scratch(alloc, layernorm_parts::scratch_bytes(rows, C));
  double *part_dg = scratch.at<double>(), *part_db = part_dg + parts * C;
  const dim3 grid(static_cast<unsigned>((C + kPartCols - 1) / kPartCols), static_cast<unsigned>(parts));
  layernorm_dparams_parts_kernel<T><<<grid, dim3(kPartCols, kPartRows), 0, c.handles().stream>>>(
      part_dg, part_db, dout, in, mean, rstd, rows, C, parts);
  DP_CUDA_CHECK_LAUNCH();
  layernorm_dparams_sum_kernel<T><<<static_cast<unsigned>((C + kThreads - 1) / kThreads), kThreads, 0,
                                    c.handles().stream>>>(dgamma, dbeta, part_dg, part_db, C, parts);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_gelu_forward(Context& c, T* out, const T* in, int64_t n) {
  if (n == 0) return;
  gelu_forward_kernel<T><<<blocks_for(n), kThreads, 0, c.handles().stream>>>(out, in, n);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_gelu_backward(Context& c, T* din, const T* dout, const T* in, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<T><<<blocks_for(n), kThreads, 0, c.handles().stream>>>(din, dout, in, n);
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
