// AdamW's kernel (adamw.cu launches it), in a header of its own so that tests/emulated runs it on
// the CPU too (warp_emulation.hpp): one thread per element, grid-stride, the CPU reference's
// arithmetic; over decay spans (kernels/ops/adamw.hpp) each element finds its span by bisection of
// the spans' ends. With `low` it also writes the updated parameter rounded to Low (bfloat16 or
// float16) — mixed precision's 16-bit copy, in the pass that wrote the float32 value, where a
// separate conversion would read every parameter again; a skipped step (skip_if) writes the copy of
// the unchanged parameters, as that conversion would.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#include "kernels/cuda/half.cuh"  // store_as (tests/emulated: warp_emulation.hpp's)
#endif
#include "kernels/ops/adamw.hpp"

namespace dp::cuda::adamw_kernels {
namespace {  // internal to each includer (adamw.cu, tests/emulated)

template <typename Low>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, AdamWStep s, int64_t n,
                             const int32_t* skip_if, DecaySpans spans, Low* low) {
  const bool skip = skip_if && *skip_if;
  if (skip && !low) return;
  const float lr = s.lr.get(), step_size = s.step_size.get(), bc2_sqrt = s.bc2_sqrt.get();
  const float decayed = 1.f - lr * s.weight_decay, kept = 1.f - lr * 0.f;  // a span without decay: weight decay 0
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if (skip) {
      low[i] = store_as<Low>(p[i]);
      continue;
    }
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
    pi = pi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + s.eps));
    p[i] = pi;
    if (low) low[i] = store_as<Low>(pi);
  }
}

}  // namespace
}  // namespace dp::cuda::adamw_kernels
