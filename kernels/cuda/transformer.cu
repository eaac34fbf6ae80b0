// LayerNorm (a warp per row; its backward in one pass over the rows: dx and each part's dγ and dβ,
// the parts added in order, kernels/layernorm_parts.hpp), exact GELU, and the embedding lookup.
// Float32 arithmetic in registers (no fp64: a GPU's double rate is a fraction of its float one),
// on every storage type (half.cuh): 16-bit activations and parameters are loaded, computed as the
// float32 kernel does and rounded once on store — bit for bit what the operands' widening around
// the float32 kernel gives, without its copies; LayerNorm's mean and rstd stay float32. The CPU
// reference sums in double: the GPU cases hold these within the float32 tolerance of it. The
// LayerNorm kernels are layernorm_kernels.cuh's (tests/emulated runs them on the CPU too).
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
#include "kernels/cuda/layernorm_kernels.cuh"

namespace dp::cuda {

namespace {

using namespace layernorm_kernels;

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
    with_lanes_for(C, [&](auto lanes) {
      layernorm_backward_one_pass_kernel<T, decltype(lanes)::value>
          <<<static_cast<unsigned>(parts), dim3(kPartCols, kPartRows), 0, stream>>>(din, part_dg, part_db, dout, in,
                                                                                   gamma, mean, rstd, rows, C, parts);
    });
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
