// Softmax cross-entropy: one thread per row (the class count is small), losses in double like the
// CPU reference, then Thrust sums the rows' losses and hits on the stream.
#include <thrust/execution_policy.h>
#include <thrust/reduce.h>

#include <algorithm>

#include "engine/cuda/check.cuh"
#include "kernels/ops/loss.hpp"
#include "engine/memory.hpp"

namespace dp::cuda {

namespace {

constexpr int kThreads = 128;

__global__ void xent_rows_kernel(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                                 float grad_scale, double* row_loss, int32_t* row_hit, int32_t* bad_label) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= B) return;
  const float* z = logits + r * K;
  const int32_t y = labels[r];
  if (y < 0 || y >= K) {  // reported on the host after the kernel
    atomicExch(bad_label, static_cast<int32_t>(r) + 1);
    row_loss[r] = 0;
    row_hit[r] = 0;
    return;
  }
  float mx = z[0];
  int64_t arg = 0;
  for (int64_t j = 1; j < K; ++j)
    if (z[j] > mx) mx = z[j], arg = j;
  double sum = 0;
  for (int64_t j = 0; j < K; ++j) sum += exp(static_cast<double>(z[j] - mx));
  const double log_sum = log(sum) + mx;
  row_loss[r] = log_sum - z[y];
  row_hit[r] = arg == y;
  if (dlogits)
    for (int64_t j = 0; j < K; ++j) {
      const double p = exp(static_cast<double>(z[j]) - log_sum);
      dlogits[r * K + j] = static_cast<float>((p - (j == y ? 1.0 : 0.0)) * grad_scale);
    }
}

}  // namespace

void softmax_xent(Context& c, const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                  float grad_scale, double* loss_sum, int64_t* correct, float* row_loss_workspace,
                  int32_t* row_hit_workspace) {
  // The workspace holds B doubles (as 2·B floats) and B + 1 int32s (the last flags a bad label).
  auto* row_loss = reinterpret_cast<double*>(row_loss_workspace);
  int32_t* bad_label = row_hit_workspace + B;
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemsetAsync(bad_label, 0, sizeof(int32_t), s));
  if (B > 0) {
    const unsigned blocks = static_cast<unsigned>((B + kThreads - 1) / kThreads);
    xent_rows_kernel<<<blocks, kThreads, 0, s>>>(logits, labels, B, K, dlogits, grad_scale, row_loss,
                                                 row_hit_workspace, bad_label);
    DP_CUDA_CHECK_LAUNCH();
  }
  // Thrust's reduce returns to the host, so these synchronise the stream: the loss is read there.
  *loss_sum = thrust::reduce(thrust::cuda::par.on(s), row_loss, row_loss + B, 0.0);
  *correct = thrust::reduce(thrust::cuda::par.on(s), row_hit_workspace, row_hit_workspace + B, int64_t{0});
  int32_t bad = 0;
  DP_CUDA_CHECK(cudaMemcpyAsync(&bad, bad_label, sizeof bad, cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaStreamSynchronize(s));
  if (bad) throw RuntimeError("sample " + std::to_string(bad - 1) + " has a label outside [0, " + std::to_string(K) + ")");
}

double softmax_xent(Context& c, CachingAllocator& alloc, const float* logits, const int32_t* labels, int64_t B,
                    int64_t K, float* dlogits, float grad_scale, int64_t* correct) {
  // Per-row scratch from the device's allocator (counted as workspace), freed once the result is
  // on the host (the call synchronises).
  ScopedBlock rows(alloc, static_cast<size_t>(std::max<int64_t>(B, 1)) * sizeof(double));
  ScopedBlock hits(alloc, static_cast<size_t>(B + 1) * sizeof(int32_t));
  double sum = 0;
  int64_t hit_count = 0;
  softmax_xent(c, logits, labels, B, K, dlogits, grad_scale, &sum, &hit_count, rows.at<float>(),
               hits.at<int32_t>());
  if (correct) *correct = hit_count;
  return sum;
}

}  // namespace dp::cuda
