// Softmax cross-entropy's kernels (loss.cu has what they compute and launches them), in a header
// of their own so that tests/emulated runs them on the CPU too (warp_emulation.hpp). The includer
// provides the shuffles and atomicExch (half.cuh comes with it under nvcc).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include "kernels/cuda/half.cuh"  // load_float, store_as (tests/emulated: warp_emulation.hpp's)
#endif
#include "kernels/scalar_arg.hpp"

namespace dp::cuda::loss_kernels {
// Internal to each file that includes it, as the kernels were in loss.cu: a kernel that is not a
// template has a host stub, which two files (loss.cu and tests/emulated) would both define.
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // a warp a row
constexpr int kSumThreads = 512;
constexpr unsigned kAllLanes = 0xffffffffu;

// A lane's running summary of a row's share: its largest logit and first index (the CPU's argmax;
// arg == K: no element yet) and Σ exp(z − mx) over what it has read, rescaled when mx grows
// (online softmax: the max and the sum in one read of the row).
struct RowSummary {
  float mx;
  int64_t arg;
  double sum;
  __device__ void add(float z, int64_t j, int64_t K) {
    if (arg == K || z > mx) {
      sum = arg == K ? 0.0 : sum * expf(mx - z);
      mx = z, arg = j;
    }
    sum += expf(z - mx);
  }
  // Another lane's summary, merged in: on a tie of the max the smaller index wins (the CPU's argmax).
  __device__ void merge(float m, int64_t a, double s, int64_t K) {
    if (a == K) return;
    if (arg == K) {
      mx = m, arg = a, sum = s;
      return;
    }
    const float top = fmaxf(mx, m);
    sum = sum * expf(mx - top) + s * expf(m - top);
    if (m > mx || (m == mx && a < arg)) arg = a;
    mx = top;
  }
};

// The row's summary: each lane's over its strided share, then across the lanes in a fixed tree,
// broadcast from lane 0.
template <typename T>
__device__ RowSummary summarize_row(const T* z, int64_t K, int lane) {
  RowSummary r{-INFINITY, K, 0.0};
  for (int64_t j = lane; j < K; j += kWarp) r.add(load_float(z[j]), j, K);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float m = __shfl_down_sync(kAllLanes, r.mx, offset);
    const int64_t a = __shfl_down_sync(kAllLanes, r.arg, offset);
    const double s = __shfl_down_sync(kAllLanes, r.sum, offset);
    r.merge(m, a, s, K);
  }
  r.mx = __shfl_sync(kAllLanes, r.mx, 0), r.arg = __shfl_sync(kAllLanes, r.arg, 0);
  r.sum = __shfl_sync(kAllLanes, r.sum, 0);
  return r;
}

// Logits and their gradient of storage type T (half.cuh): float32 arithmetic on the loaded
// values, each gradient rounded once on store. One read of the row for the max, the argmax and
// the sum, one more for the gradient. Rows `ld` apart (≥ K: the columns past K padding, their
// gradient written zero).
template <typename T>
__global__ void xent_rows_kernel(const T* logits, const int32_t* labels, int64_t B, int64_t K, int64_t ld,
                                 T* dlogits, ScalarArg scale_arg, double* row_loss, int32_t* row_hit,
                                 int32_t* bad_label, float label_smoothing) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (r >= B) return;  // the whole warp: r is the same on every lane
  const T* z = logits + r * ld;
  const int32_t y = labels[r];
  if (y < 0 || y >= K) {  // reported on the host after the kernel
    if (lane == 0) {
      atomicExch(bad_label, static_cast<int32_t>(r) + 1);
      row_loss[r] = 0;
      row_hit[r] = 0;
    }
    return;
  }
  const float zy = load_float(z[y]);  // before any lane writes the row (dlogits may be logits)
  const RowSummary row = summarize_row(z, K, lane);
  const double eps = label_smoothing, off = eps / static_cast<double>(K);  // the target's share of every class
  double zsum = 0;  // label smoothing's Σ_k z_k (mean_k(−log p_k) = lse − mean(z))
  if (eps > 0) {    // the same on every lane: the whole warp shuffles, or none of it
    for (int64_t j = lane; j < K; j += kWarp) zsum += load_float(z[j]);
    for (int offset = kWarp / 2; offset > 0; offset /= 2) zsum += __shfl_down_sync(kAllLanes, zsum, offset);
  }
  __syncwarp();  // every lane has read its logits by now
  if (lane == 0) {
    const double lse = log(row.sum) + row.mx;
    row_loss[r] = eps > 0 ? (1.0 - eps) * (lse - zy) + eps * (lse - zsum / static_cast<double>(K)) : lse - zy;
    row_hit[r] = row.arg == y;
  }
  if (!dlogits) return;
  const double grad_scale = scale_arg.get();
  T* g = dlogits + r * ld;
  for (int64_t j = lane; j < K; j += kWarp)  // each lane rewrites only what it read
    g[j] = store_as<T>(static_cast<float>(
        (expf(load_float(z[j]) - row.mx) / row.sum - (j == y ? 1.0 - eps : 0.0) - off) * grad_scale));
  for (int64_t j = K + lane; j < ld; j += kWarp) g[j] = store_as<T>(0.f);
}

// sums[0] = Σ row_loss, sums[1] = Σ row_hit: each thread a strided share, then a tree; `scalars`
// (optional) gets them as float32.
__global__ void sum_rows_kernel(const double* row_loss, const int32_t* row_hit, int64_t B, double* sums,
                                float* scalars) {
  __shared__ double loss[kSumThreads];
  __shared__ long long hits[kSumThreads];
  double l = 0;
  long long h = 0;
  for (int64_t r = threadIdx.x; r < B; r += kSumThreads) l += row_loss[r], h += row_hit[r];
  loss[threadIdx.x] = l;
  hits[threadIdx.x] = h;
  __syncthreads();
  for (int half = kSumThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) loss[threadIdx.x] += loss[threadIdx.x + half], hits[threadIdx.x] += hits[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    sums[0] = loss[0], sums[1] = static_cast<double>(hits[0]);
    if (scalars) scalars[0] = static_cast<float>(loss[0]), scalars[1] = static_cast<float>(hits[0]);
  }
}

}  // namespace
}  // namespace dp::cuda::loss_kernels
