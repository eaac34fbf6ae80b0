// Softmax cross-entropy: one warp per row (its lanes read consecutive logits: a language model's
// rows are its vocabulary long), exps in float32 summed in double like the CPU reference, combined
// across lanes in a fixed order; then one block sums the rows' losses and hits (a fixed-shape
// tree: the same bits every run) and the host reads the two sums and the bad-label flag, waiting
// for this stream only.
// (Thrust's reduce did this with a cudaMalloc and a cudaFree per call: the free waits for the whole
// GPU, every logical device's stream on it.)
#include <algorithm>
#include <cstddef>

#include "core/cuda/check.cuh"
#include "kernels/ops/loss.hpp"
#include "core/scratch.hpp"

namespace dp::cuda {

static_assert(offsetof(LossSums, hits) == offsetof(LossSums, loss) + sizeof(double), "one copy fills both sums");

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;  // a warp a row
constexpr int kSumThreads = 512;
constexpr unsigned kAllLanes = 0xffffffffu;

// The row's largest logit and its first index (the CPU's argmax): each lane's over its strided
// share, then across the lanes. K marks a lane with no element.
__device__ void row_max(const float* z, int64_t K, int lane, float& mx, int64_t& arg) {
  mx = -INFINITY, arg = K;
  for (int64_t j = lane; j < K; j += kWarp)
    if (arg == K || z[j] > mx) mx = z[j], arg = j;
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float m = __shfl_down_sync(kAllLanes, mx, offset);
    const int64_t a = __shfl_down_sync(kAllLanes, arg, offset);
    if (a != K && (arg == K || m > mx || (m == mx && a < arg))) mx = m, arg = a;
  }
  mx = __shfl_sync(kAllLanes, mx, 0), arg = __shfl_sync(kAllLanes, arg, 0);
}

__global__ void xent_rows_kernel(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                                 ScalarArg scale_arg, double* row_loss, int32_t* row_hit, int32_t* bad_label,
                                 float label_smoothing) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (r >= B) return;  // the whole warp: r is the same on every lane
  const float* z = logits + r * K;
  const int32_t y = labels[r];
  if (y < 0 || y >= K) {  // reported on the host after the kernel
    if (lane == 0) {
      atomicExch(bad_label, static_cast<int32_t>(r) + 1);
      row_loss[r] = 0;
      row_hit[r] = 0;
    }
    return;
  }
  const float zy = z[y];  // before any lane writes the row (dlogits may be logits)
  float mx;
  int64_t arg;
  row_max(z, K, lane, mx, arg);
  const double eps = label_smoothing, off = eps / static_cast<double>(K);  // the target's share of every class
  double sum = 0, zsum = 0;  // zsum: label smoothing's Σ_k z_k (mean_k(−log p_k) = lse − mean(z))
  for (int64_t j = lane; j < K; j += kWarp) sum += expf(z[j] - mx);
  if (eps > 0)  // the same on every lane: the whole warp shuffles, or none of it
    for (int64_t j = lane; j < K; j += kWarp) zsum += z[j];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sum += __shfl_down_sync(kAllLanes, sum, offset);
    if (eps > 0) zsum += __shfl_down_sync(kAllLanes, zsum, offset);
  }
  sum = __shfl_sync(kAllLanes, sum, 0);  // every lane has read its logits by now
  if (lane == 0) {
    const double lse = log(sum) + mx;
    row_loss[r] = eps > 0 ? (1.0 - eps) * (lse - zy) + eps * (lse - zsum / static_cast<double>(K)) : lse - zy;
    row_hit[r] = arg == y;
  }
  if (!dlogits) return;
  const double grad_scale = scale_arg.get();
  for (int64_t j = lane; j < K; j += kWarp)  // each lane rewrites only what it read
    dlogits[r * K + j] = static_cast<float>((expf(z[j] - mx) / sum - (j == y ? 1.0 - eps : 0.0) - off) * grad_scale);
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

// The rows, then the sums, enqueued on the context's stream over one scratch block from `alloc`
// (returned stream-ordered when `scratch` goes): B row losses and the two sums (doubles), then B
// row hits and the bad-label flag. The sums and the flag stay in device memory for the caller to
// copy out.
struct XentOnDevice {
  const double* sums;      // [loss, hits]
  const int32_t* bad_row;  // 1 + the first bad row, or 0
};
XentOnDevice enqueue_xent(Context& c, ScopedBlock& scratch, const float* logits, const int32_t* labels, int64_t B,
                          int64_t K, float* dlogits, ScalarArg grad_scale, float* scalars, float label_smoothing) {
  const size_t doubles = static_cast<size_t>(B + 2) * sizeof(double);
  auto* row_loss = scratch.at<double>();
  double* sums = row_loss + B;
  auto* row_hit = scratch.at<int32_t>(doubles);
  int32_t* bad_label = row_hit + B;
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemsetAsync(bad_label, 0, sizeof(int32_t), s));
  if (B > 0) {
    const unsigned blocks = static_cast<unsigned>((B + kRowsPerBlock - 1) / kRowsPerBlock);
    xent_rows_kernel<<<blocks, kRowsPerBlock * kWarp, 0, s>>>(logits, labels, B, K, dlogits, grad_scale, row_loss,
                                                              row_hit, bad_label, label_smoothing);
    DP_CUDA_CHECK_LAUNCH();
  }
  sum_rows_kernel<<<1, kSumThreads, 0, s>>>(row_loss, row_hit, B, sums, scalars);
  DP_CUDA_CHECK_LAUNCH();
  return {sums, bad_label};
}


}  // namespace

double softmax_xent(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                    int64_t K, float* dlogits, float grad_scale, int64_t* correct, float label_smoothing) {
  ScopedBlock scratch(alloc, softmax_xent_scratch_bytes(B));
  const XentOnDevice d = enqueue_xent(c, scratch, logits, labels, B, K, dlogits, grad_scale, nullptr, label_smoothing);
  cudaStream_t s = c.handles().stream;
  double sums[2] = {0, 0};
  int32_t bad = 0;
  DP_CUDA_CHECK(cudaMemcpyAsync(sums, d.sums, sizeof sums, cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaMemcpyAsync(&bad, d.bad_row, sizeof bad, cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaStreamSynchronize(s));  // the result is on the host (and the scratch free to reuse)
  if (bad) throw RuntimeError("sample " + std::to_string(bad - 1) + " has a label outside [0, " + std::to_string(K) + ")");
  if (correct) *correct = static_cast<int64_t>(sums[1]);
  return sums[0];
}

void softmax_xent_into(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                       int64_t K, float* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing) {
  ScopedBlock scratch(alloc, softmax_xent_scratch_bytes(B));
  const XentOnDevice d = enqueue_xent(c, scratch, logits, labels, B, K, dlogits, grad_scale, scalars, label_smoothing);
  // LossSums is {double, double, int32}: the two sums and the flag, in two copies.
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemcpyAsync(&out->loss, d.sums, 2 * sizeof(double), cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaMemcpyAsync(&out->bad_row, d.bad_row, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  // The scratch goes back to the cache stream-ordered: only work enqueued after this reuses it.
}

}  // namespace dp::cuda
