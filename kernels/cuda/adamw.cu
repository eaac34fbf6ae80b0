// AdamW: one thread per element, grid-stride, the same arithmetic as the CPU reference; over decay
// spans (kernels/ops/adamw.hpp) each element finds its span by bisection of the spans' ends.
#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/adamw.hpp"

namespace dp::cuda {

namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, AdamWStep s, int64_t n,
                             const int32_t* skip_if, DecaySpans spans) {
  if (skip_if && *skip_if) return;
  const float lr = s.lr.get(), step_size = s.step_size.get(), bc2_sqrt = s.bc2_sqrt.get();
  const float decayed = 1.f - lr * s.weight_decay, kept = 1.f - lr * 0.f;  // a span without decay: weight decay 0
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float decay = decayed;
    if (spans.count > 0) {  // the first span whose end is past i
      int lo = 0, hi = spans.count - 1;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (spans.end[mid] > i) hi = mid;
        else lo = mid + 1;
      }
      if (!spans.decay[lo]) decay = kept;
    }
    float pi = p[i] * decay;
    const float mi = m[i] * s.beta1 + (1.f - s.beta1) * g[i];
    const float vi = v[i] * s.beta2 + (1.f - s.beta2) * (g[i] * g[i]);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + s.eps));
  }
}

}  // namespace

void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  int64_t n, const int32_t* skip_if) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(param, grad, exp_avg, exp_avg_sq, s, n, skip_if,
                                                                   DecaySpans{});
  DP_CUDA_CHECK_LAUNCH();
}

void adamw_update(Context& c, float* param, const float* grad, float* exp_avg, float* exp_avg_sq, const AdamWStep& s,
                  const DecaySpans& spans, const int32_t* skip_if) {
  const int64_t n = spans.count > 0 ? spans.end[spans.count - 1] : 0;
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(param, grad, exp_avg, exp_avg_sq, s, n, skip_if,
                                                                   spans);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
