// Dropout in training (PyTorch's nn.Dropout, inverted): out = in · f per element, f = 1/(1 − p)
// where the mask keeps the element and 0 where it drops it (kernels/dropout_mask.hpp draws which,
// from the pass's key). Backward is the same op on the gradient, din = dout · f, the mask drawn
// again: nothing is stored between the two. `in` holds `samples` samples of `per_sample` elements;
// its sample i is the step's sample mask.sample(i). out may be in (in place). With
// mask.whole_sample, stochastic depth: each sample kept or dropped whole.
#pragma once
#include <cstdint>

#include "kernels/dropout_mask.hpp"
#include "kernels/exec.hpp"
#include "kernels/operands.hpp"

namespace dp {
namespace cpu {
void dropout_apply(ThreadPool& pool, float* out, const float* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask);
}  // namespace cpu
namespace cuda {
void dropout_apply(Context& c, float* out, const float* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask);
// out and in of 16-bit type t: scaled in float32, rounded once on store.
void dropout_apply(Context& c, DType t, void* out, const void* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask);
}  // namespace cuda

// 16-bit operands compute in float32 and round once: natively on a GPU, through Operands on a CPU.
inline void dropout_apply(const Exec& ex, Buf out, Buf in, int64_t samples, int64_t per_sample,
                          const DropoutMask& mask) {
  Operands o(ex, "dropout", {out, in});
  const int64_t n = samples * per_sample;
  o.flops(2.0 * n);
  float* y = o.out(out, n);
  const float* x = o.in(in, n);
#if DP_WITH_CUDA
  if (o.native() != DType::F32)
    return cuda::dropout_apply(*ex.cuda, o.native(), out.ptr, in.ptr, samples, per_sample, mask);
#endif
  DP_DISPATCH(ex, dropout_apply, y, x, samples, per_sample, mask);
  o.finish();
}

}  // namespace dp
