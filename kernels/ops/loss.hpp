// Softmax cross-entropy over logits [B, K] with int32 labels. Returns Σ_rows −log softmax[label]
// to the host (a sum: the caller divides for a mean; the call completes the device's work before
// it), writes dlogits = (softmax − onehot)·grad_scale when dlogits is present, and counts correct
// argmax predictions when `correct` is not null. A label outside [0, K) is a RuntimeError.
// dlogits may be logits itself (each row is read whole before its gradient is written).
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"

namespace dp {
namespace cpu {
double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                    float grad_scale, int64_t* correct);
}  // namespace cpu
namespace cuda {
// Per-row scratch comes from `alloc` (counted as workspace).
double softmax_xent(Context& c, CachingAllocator& alloc, const float* logits, const int32_t* labels, int64_t B,
                    int64_t K, float* dlogits, float grad_scale, int64_t* correct);
// The kernel itself, over caller-provided scratch: B + 2 doubles (as floats) and B + 1 int32s.
void softmax_xent(Context& c, const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                  float grad_scale, double* loss_sum, int64_t* correct, float* row_loss_workspace,
                  int32_t* row_hit_workspace);
}  // namespace cuda

double softmax_xent(const Exec& ex, Buf logits, Buf labels, int64_t B, int64_t K, Buf dlogits, float grad_scale,
                    int64_t* correct);

}  // namespace dp
