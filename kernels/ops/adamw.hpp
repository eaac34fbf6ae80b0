// AdamW with torch.optim.AdamW's semantics (PyTorch 1.13's single-tensor path), per element:
//   p ·= 1 − lr·wd;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   p −= step_size · m / (√v / bc2_sqrt + ε),  step_size = lr / (1 − β1^t), bc2_sqrt = √(1 − β2^t)
// The bias corrections are computed by the caller (in double, as PyTorch does in Python). The
// per-step values (lr, step_size, bc2_sqrt) may be read from device memory when the kernel runs
// (kernels/scalar_arg.hpp): the step's per-step values, engine/optim/step_scalars.hpp.
// skip_if (device memory, optional): when it holds a non-zero value the update does nothing —
// fp16's verdict on inf/NaN gradients, decided on the device without the host.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "kernels/exec.hpp"
#include "kernels/ops/convert.hpp"
#include "kernels/scalar_arg.hpp"

namespace dp {

struct AdamWStep {
  ScalarArg lr;
  float weight_decay, beta1, beta2, eps;
  ScalarArg step_size;  // lr / (1 − β1^t)
  ScalarArg bc2_sqrt;   // √(1 − β2^t)
};

// torch.optim's parameter groups over one flat buffer: consecutive spans of elements, each with
// the step's weight decay or none, updated in one call (on a GPU one launch: the spans travel in
// the launch, each element finds its own; a GPT has a hundred spans, matrices and the rest, where a
// launch each cost more than the update). Span k covers [end[k − 1], end[k]) (from 0).
struct DecaySpans {
  static constexpr int kMax = 64;
  int count = 0;
  int64_t end[kMax] = {};
  bool decay[kMax] = {};
};

namespace cpu {
void adamw_update(ThreadPool& pool, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                  const AdamWStep& s, int64_t n, const int32_t* skip_if = nullptr);
}  // namespace cpu
namespace cuda {
void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  int64_t n, const int32_t* skip_if = nullptr);
// Every span of `spans` (its last end is the element count), s.weight_decay where a span decays;
// with `low` (bfloat16 or float16) the updated parameters rounded into it in the same pass.
void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  const DecaySpans& spans, const int32_t* skip_if = nullptr, void* low = nullptr,
                  DType low_type = DType::BF16);
}  // namespace cuda

inline void adamw_update(const Exec& ex, Buf param, Buf grad, Buf exp_avg, Buf exp_avg_sq, const AdamWStep& s,
                         int64_t n, Buf skip_if = {}) {
  constexpr const char* op = "adamw_update";
  OpCounter c(ex, op);
  c.updates(param, n), c.reads(grad, n), c.updates(exp_avg, n), c.updates(exp_avg_sq, n), c.reads(skip_if, 1);
  c.flops(16.0 * n);
  DP_DISPATCH(ex, adamw_update, param.f32(op), grad.f32(op), exp_avg.f32(op), exp_avg_sq.f32(op), s, n,
              skip_if.i32(op));
}

// The spans' elements in one op: one launch on a GPU; elsewhere the reference a span at a time
// (weight decay 0 where a span has none: the same bits either way).
// low (optional, bfloat16 or float16, n elements): mixed precision's 16-bit copy of the parameters,
// written after the update — the unchanged parameters' where skip_if skips it — as
// convert(low, param) would, in the update's own pass on a GPU (the reference converts after it).
inline void adamw_update(const Exec& ex, Buf param, Buf grad, Buf exp_avg, Buf exp_avg_sq, const AdamWStep& s,
                         const DecaySpans& spans, Buf skip_if = {}, Buf low = {}) {
  constexpr const char* op = "adamw_update";
  const int64_t n = spans.count > 0 ? spans.end[spans.count - 1] : 0;
  if (low.ptr && low.dtype != DType::BF16 && low.dtype != DType::F16)
    throw RuntimeError(std::string(op) + ": the 16-bit copy is bfloat16 or float16, not " + dtype_name(low.dtype));
  OpCounter c(ex, op);
  c.updates(param, n), c.reads(grad, n), c.updates(exp_avg, n), c.updates(exp_avg_sq, n), c.reads(skip_if, 1);
  c.writes(low, n);
  c.flops(16.0 * n);
#if DP_WITH_CUDA
  if (ex.on_cuda())
    return cuda::adamw_update(*ex.cuda, param.f32(op), grad.f32(op), exp_avg.f32(op), exp_avg_sq.f32(op), s, spans,
                              skip_if.i32(op), low.ptr, low.dtype);
#endif
  for (int k = 0; k < spans.count; ++k) {
    const int64_t begin = k > 0 ? spans.end[k - 1] : 0, count = spans.end[k] - begin;
    AdamWStep t = s;
    if (!spans.decay[k]) t.weight_decay = 0.f;
    auto at = [begin](Buf b) { return b.ptr ? Buf{static_cast<float*>(b.ptr) + begin, b.dtype} : b; };
    DP_DISPATCH(ex, adamw_update, at(param).f32(op), at(grad).f32(op), at(exp_avg).f32(op), at(exp_avg_sq).f32(op), t,
                count, skip_if.i32(op));
    if (!low.ptr) continue;
    uint16_t* copy = static_cast<uint16_t*>(low.ptr) + begin;
    if (low.dtype == DType::BF16) DP_DISPATCH(ex, float_to_bf16, copy, at(param).f32(op), count);
    else DP_DISPATCH(ex, float_to_f16, copy, at(param).f32(op), count);
  }
}

}  // namespace dp
