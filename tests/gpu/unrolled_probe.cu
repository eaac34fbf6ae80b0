#include "tests/gpu/unrolled_probe.hpp"

#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/unrolled.cuh"

namespace dp::cuda {

namespace {
template <typename I>
__global__ void probe_kernel(float* out, const float* a, const float* b, I n) {
  unrolled_map<I, 2>(out, {a, b}, n, [](const float(&v)[2], I i) { return v[0] + 2.f * v[1] + static_cast<float>(i); });
}
}  // namespace

void unrolled_probe(Context& c, float* out, const float* a, const float* b, int64_t n, unsigned blocks, bool index64) {
  if (index64)
    probe_kernel<int64_t><<<blocks, kThreads, 0, c.handles().stream>>>(out, a, b, n);
  else
    probe_kernel<int32_t><<<blocks, kThreads, 0, c.handles().stream>>>(out, a, b, static_cast<int32_t>(n));
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
