// Softmax cross-entropy over logits [B, K] with int32 labels. Returns Σ_rows −log softmax[label]
// to the host (a sum: the caller divides for a mean; the call completes the device's work before
// it), writes dlogits = (softmax − onehot)·grad_scale when dlogits is present, and counts correct
// argmax predictions when `correct` is not null. A label outside [0, K) is a RuntimeError.
// dlogits may be logits itself (each row is read whole before its gradient is written).
// label_smoothing ε (torch.nn.CrossEntropyLoss's): the target is (1 − ε)·onehot + ε/K, so a row's
// loss is (1 − ε)·(−log p_label) + ε·mean_k(−log p_k) and its gradient softmax − that target.
// `pitch` (0: K) is the rows' stride: pitch > K reads K logits of each row stored `pitch` wide (a
// language model's logits padded for alignment, models/gpt.cpp), the columns [K, pitch) never read,
// and writes their gradient zero.
#pragma once
#include <cstdint>

#include "kernels/exec.hpp"
#include "kernels/scalar_arg.hpp"

namespace dp {

// A loss's sums as the host reads them once the step's work is done (softmax_xent_into): written
// by the device's stream — on a GPU by a copy into page-locked memory — never read before the host
// has waited for that stream.
struct LossSums {
  double loss = 0;      // Σ rows' −log softmax[label]
  double hits = 0;      // correct argmax predictions
  int32_t bad_row = 0;  // 1 + the first row whose label is outside [0, K); 0 if none
};

// The scratch the loss takes beside its operands: the CUDA kernels' rows (B losses and hits, the
// two sums, the bad-label flag). Every backend takes it for the op's span (host and meta devices
// leave it unused), so that they all allocate alike and a plan counts it (docs/plan.md).
size_t softmax_xent_scratch_bytes(int64_t B);

namespace cpu {
double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                    float grad_scale, int64_t* correct, float label_smoothing = 0.f, int64_t pitch = 0);
}  // namespace cpu
namespace cuda {
// Per-row scratch comes from `alloc` (counted as workspace).
double softmax_xent(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                    int64_t K, float* dlogits, float grad_scale, int64_t* correct, float label_smoothing = 0.f,
                    int64_t pitch = 0);
// The same without waiting: the sums reach *out (host memory; page-locked for the copy to be
// asynchronous) when the stream gets there, and, when scalars is not null, float [loss, hits]
// into that device memory too. Scratch from `alloc`, returned stream-ordered.
void softmax_xent_into(Context& c, ScratchMemory& alloc, const float* logits, const int32_t* labels, int64_t B,
                       int64_t K, float* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing = 0.f, int64_t pitch = 0);
// Logits and dlogits of float type t (bfloat16, float16: read and written natively, the float32
// arithmetic on the loaded values, each gradient rounded once).
double softmax_xent(Context& c, ScratchMemory& alloc, DType t, const void* logits, const int32_t* labels, int64_t B,
                    int64_t K, void* dlogits, float grad_scale, int64_t* correct, float label_smoothing = 0.f,
                    int64_t pitch = 0);
void softmax_xent_into(Context& c, ScratchMemory& alloc, DType t, const void* logits, const int32_t* labels, int64_t B,
                       int64_t K, void* dlogits, ScalarArg grad_scale, LossSums* out, float* scalars,
                       float label_smoothing = 0.f, int64_t pitch = 0);
}  // namespace cuda

double softmax_xent(const Exec& ex, Buf logits, Buf labels, int64_t B, int64_t K, Buf dlogits, float grad_scale,
                    int64_t* correct, float label_smoothing = 0.f, int64_t pitch = 0);
// In the step (it must not wait for its device): the sums into *out as the stream reaches them,
// read by the host after waiting for it; a bad label is out->bad_row, not an exception. Optional
// `scalars`: float32 [loss, hits] on the device (in-replica loss: what device 0 gathers). The
// gradient's scale may be read from device memory when the kernel runs (the step's, which fp16's
// loss scale changes from step to step).
void softmax_xent_into(const Exec& ex, Buf logits, Buf labels, int64_t B, int64_t K, Buf dlogits, ScalarArg grad_scale,
                       LossSums* out, Buf scalars = {}, float label_smoothing = 0.f, int64_t pitch = 0);

}  // namespace dp
