// Softmax cross-entropy: one warp per row (its lanes read consecutive logits: a language model's
// rows are its vocabulary long), the max and the sum of exps (float32 exps summed in double, like
// the CPU reference) in one read of the row, combined across lanes in a fixed order, the gradient
// in a second read; on 16-bit logits natively (half.cuh: no widened copies, each gradient rounded
// once on store); then one block sums the rows' losses and hits (a fixed-shape
// tree: the same bits every run) and the host reads the two sums and the bad-label flag, waiting
// for this stream only.
// (Thrust's reduce did this with a cudaMalloc and a cudaFree per call: the free waits for the whole
// GPU, every logical device's stream on it.) The kernels are loss_kernels.cuh's (tests/emulated
// runs them on the CPU too).
#include <algorithm>
#include <cstddef>

#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/loss_kernels.cuh"
#include "kernels/ops/loss.hpp"
#include "core/scratch.hpp"

namespace dp::cuda {

static_assert(offsetof(LossSums, hits) == offsetof(LossSums, loss) + sizeof(double), "one copy fills both sums");

namespace {

using namespace loss_kernels;

// The rows, then the sums, enqueued on the context's stream over one scratch block from `alloc`
// (returned stream-ordered when `scratch` goes): B row losses and the two sums (doubles), then B
// row hits and the bad-label flag. The sums and the flag stay in device memory for the caller to
// copy out.
struct XentOnDevice {
  const double* sums;      // [loss, hits]
  const int32_t* bad_row;  // 1 + the first bad row, or 0
};
XentOnDevice enqueue_xent(Context& c, ScopedBlock& scratch, DType t, const void* logits, const int32_t* labels,
                          int64_t B, int64_t K, int64_t pitch, void* dlogits, ScalarArg grad_scale, float* scalars,
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
      xent_rows_kernel<T><<<blocks, kRowsPerBlock * kWarp, 0, s>>>(
          static_cast<const T*>(logits), labels, B, K, pitch > 0 ? pitch : K, static_cast<T*>(dlogits), grad_scale,
          row_loss, row_hit, bad_label, label_smoothing);
    });
    DP_CUDA_CHECK_LAUNCH();
  }
  sum_rows_kernel<<<1, kSumThreads, 0, s>>>(row_loss, row_hit, B, sums, scalars);
  DP_CUDA_CHECK_LAUNCH();
  return {sums, bad_label};
}

}  // namespace

double softmax_xent(Context& c, ScratchMemory& alloc, DType t, const void* logits, const int32_t* labels, int64_t B,
                    int64_t K, void* dlogits, float grad_scale, int64_t* correct, float label_smoothing,
                    int64_t pitch) {
  ScopedBlock scratch(alloc, softmax_xent_scratch_bytes(B));
  const XentOnDevice d =
      enqueue_xent(c, scratch, t, logits, labels, B, K, pitch, dlogits, grad_scale, nullptr, label_smoothing);
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
                    int64_t K, float* dlogits, float grad_scale, int64_t* correct, float label_smoothing,
                    int64_t pitch) {
  return softmax_xent(c, alloc, DType::F32, logits, labels, B, K, dlogits, grad_scale, correct, label_smoothing, pitch);
}

void softmax_xent_into(Context& c, ScratchMemory& alloc, DType t, const void* logits, const int32_t* labels, int64_t B,
                       int64_t K, void* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing, int64_t pitch) {
  ScopedBlock scratch(alloc, softmax_xent_scratch_bytes(B));
  const XentOnDevice d =
      enqueue_xent(c, scratch, t, logits, labels, B, K, pitch, dlogits, grad_scale, scalars, label_smoothing);
  // LossSums is {double, double, int32}: the two sums and the flag, in two copies.
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemcpyAsync(&out->loss, d.sums, 2 * sizeof(double), cudaMemcpyDeviceToHost, s));
  DP_CUDA_CHECK(cudaMemcpyAsync(&out->bad_row, d.bad_row, sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  // The scratch goes back to the cache stream-ordered: only work enqueued after this reuses it.
}

void softmax_xent_into(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                       int64_t K, float* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing, int64_t pitch) {
  softmax_xent_into(c, alloc, DType::F32, logits, labels, B, K, dlogits, grad_scale, out, scalars, label_smoothing,
                    pitch);
}

}  // namespace dp::cuda
