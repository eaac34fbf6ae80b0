// Dropout's mask drawn per element from the pass's key in device memory (kernels/dropout_mask.hpp):
// the same elements as the CPU reference drops. A template over the storage type (half.cuh): 16-bit
// values are scaled in float32 and rounded once, as the operands' widening would give.
#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/dropout.hpp"

namespace dp::cuda {

namespace {

template <typename T>
__global__ void dropout_kernel(T* out, const T* in, int64_t n, int64_t per_sample, DropoutMask mask,
                               uint32_t threshold, float scale) {
  const uint64_t key = mask.pass_key();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = i / per_sample;
    const uint64_t state = dropout_sample_state(key, mask.site, mask.sample(s));
    out[i] = store_as<T>(load_float(in[i]) * dropout_factor(state, mask.draw_of(i - s * per_sample), threshold, scale));
  }
}

template <typename T>
void launch_dropout(Context& c, T* out, const T* in, int64_t samples, int64_t per_sample, const DropoutMask& mask) {
  const int64_t n = samples * per_sample;
  if (n == 0) return;
  dropout_kernel<T><<<blocks_for(n), kThreads, 0, c.handles().stream>>>(out, in, n, per_sample, mask, mask.threshold(),
                                                                         mask.scale());
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void dropout_apply(Context& c, float* out, const float* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask) {
  launch_dropout(c, out, in, samples, per_sample, mask);
}

void dropout_apply(Context& c, DType t, void* out, const void* in, int64_t samples, int64_t per_sample,
                   const DropoutMask& mask) {
  with_float_type(t, "dropout", [&](auto v) {
    using T = decltype(v);
    launch_dropout(c, static_cast<T*>(out), static_cast<const T*>(in), samples, per_sample, mask);
  });
}

}  // namespace dp::cuda
