// Softmax cross-entropy: one warp per row (its lanes read consecutive logits: a language model's
// rows are its vocabulary long), the max and the sum of exps (float32 exps summed in double, like
// the CPU reference) in one read of the row, combined across lanes in a fixed order, the gradient
// in a second read; on 16-bit logits natively (half.cuh: no widened copies, each gradient rounded
// once on store); then one block sums the rows' losses and hits (a fixed-shape
// tree: the same bits every run) and the host reads the two sums and the bad-label flag, waiting
// for this stream only.
// (Thrust's reduce did this with a cudaMalloc and a cudaFree per call: the free waits for the whole
// GPU, every logical device's stream on it.)
#include <algorithm>
#include <cstddef>

#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/ops/loss.hpp"
#include "core/scratch.hpp"

namespace dp::cuda {

static_assert(offsetof(LossSums, hits) == offsetof(LossSums, loss) + sizeof(double), "one copy fills both sums");

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
// the sum, one more for the gradient.
template <typename T>
__global__ void xent_rows_kernel(const T* logits, const int32_t* labels, int64_t B, int64_t K, T* dlogits,
                                 ScalarArg scale_arg, double* row_loss, int32_t* row_hit, int32_t* bad_label,
                                 float label_smoothing) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (r >= B) return;  // the whole warp: r is the same on every lane
  const T* z = logits + r * K;
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
  for (int64_t j = lane; j < K; j += kWarp)  // each lane rewrites only what it read
    dlogits[r * K + j] = store_as<T>(static_cast<float>(
        (expf(load_float(z[j]) - row.mx) / row.sum - (j == y ? 1.0 - eps : 0.0) - off) * grad_scale));
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
XentOnDevice enqueue_xent(Context& c, ScopedBlock& scratch, DType t, const void* logits, const int32_t* labels,
                          int64_t B, int64_t K, void* dlogits, ScalarArg grad_scale, float* scalars,
                          float label_smoothing) {
  const size_t doubles = static_cast<size_t>(B + 2) * sizeof(double);
  auto* row_loss = scratch.at<double>();
  double* sums = row_loss + B;
  auto* row_hit = scratch.at<int32_t>(doubles);
  int32_t* bad_label = row_hit + B;
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemsetAsync(bad_label, 0, sizeof(int32_t), s));
  if (B > 0) {
    const unsigned blocks = static_cast<unsigned>((B + kRowsPerBlock - 1) / kRowsPerBlock);
    with_float_type(t, "softmax_xent", [&](auto tag) {
      using T = decltype(tag);
      xent_rows_kernel<T><<<blocks, kRowsPerBlock * kWarp, 0, s>>>(static_cast<const T*>(logits), labels, B, K,
                                                                   static_cast<T*>(dlogits), grad_scale, row_loss,
                                                                   row_hit, bad_label, label_smoothing);
    });
    DP_CUDA_CHECK_LAUNCH();
  }
  sum_rows_kernel<<<1, kSumThreads, 0, s>>>(row_loss, row_hit, B, sums, scalars);
  DP_CUDA_CHECK_LAUNCH();
  return {sums, bad_label};
}

}  // namespace

double softmax_xent(Context& c, ScratchMemory& alloc, DType t, const void* logits, const int32_t* labels, int64_t B,
                    int64_t K, void* dlogits, float grad_scale, int64_t* correct, float label_smoothing) {
  ScopedBlock scratch(alloc, softmax_xent_scratch_bytes(B));
  const XentOnDevice d = enqueue_xent(c, scratch, t, logits, labels, B, K, dlogits, grad_scale, nullptr, label_smoothing);
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

double softmax_xent(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                    int64_t K, float* dlogits, float grad_scale, int64_t* correct, float label_smoothing) {
  return softmax_xent(c, alloc, DType::F32, logits, labels, B, K, dlogits, grad_scale, correct, label_smoothing);
}

void softmax_xent_into(Context& c, ScratchMemory& alloc, DType t, const void* logits, const int32_t* labels, int64_t B,
                       int64_t K, void* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing) {
  ScopedBlock scratch(alloc, softmax_xent_scratch_bytes(B));
  const XentOnDevice d =
      enqueue_xent(c, scratch, t, logits, labels, B, K, dlogits, grad_scale, scalars, label_smoothing);
  // LossSums is {double, double, int32}: the two sums and the flag, in two copies.
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemcpyAsync(&out->loss, d.sums, 2 * sizeof(double), cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaMemcpyAsync(&out->bad_row, d.bad_row, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  // The scratch goes back to the cache stream-ordered: only work enqueued after this reuses it.
}

void softmax_xent_into(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                       int64_t K, float* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing) {
  softmax_xent_into(c, alloc, DType::F32, logits, labels, B, K, dlogits, grad_scale, out, scalars, label_smoothing);
}

}  // namespace dp::cuda
