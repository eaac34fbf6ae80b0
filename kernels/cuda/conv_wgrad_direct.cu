// A small convolution's weight gradient without cuDNN: partial sums per part of the batch's output
// rows, then each tap's parts added in order (the arithmetic, and why: kernels/conv_wgrad_parts.hpp).
#include "engine/cuda/check.cuh"
#include "engine/memory.hpp"
#include "kernels/conv_wgrad_parts.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/conv2d.hpp"

namespace dp::cuda {

namespace {

static_assert(conv_wgrad::kThreads == kThreads, "the parts' threads are the launches' blocks");

// Block p: part p's sums of every tap, partials[p][tap].
template <int P>
__global__ void wgrad_partials_kernel(float* partials, const float* __restrict__ dy, const float* __restrict__ x,
                                      conv_wgrad::Geometry g, int64_t parts) {
  const int64_t p = blockIdx.x, T = g.taps(), R = g.rows();
  float acc[P];
  conv_wgrad::part_sums(acc, dy, x, g, threadIdx.x, conv_wgrad::part_begin(R, p, parts),
                        conv_wgrad::part_begin(R, p + 1, parts));
#pragma unroll
  for (int j = 0; j < P; ++j)
    if (const int64_t t = threadIdx.x + int64_t{j} * kThreads; t < T) partials[p * T + t] = acc[j];
}

__global__ void wgrad_finish_kernel(float* dw, const float* partials, int64_t taps, int64_t parts) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t < taps) dw[t] = conv_wgrad::tap_total(partials, taps, parts, t);
}

template <int P>
void launch_partials(cudaStream_t stream, float* partials, const float* dy, const float* x,
                     const conv_wgrad::Geometry& g, int64_t parts) {
  wgrad_partials_kernel<P><<<static_cast<unsigned>(parts), kThreads, 0, stream>>>(partials, dy, x, g, parts);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool conv2d_weight_grad_direct(Context& c, CachingAllocator& alloc, float* dw, const float* dout, const float* in,
                               const ConvShape& s) {
  if (!conv_wgrad::eligible(s)) return false;
  const conv_wgrad::Geometry g = conv_wgrad::geometry_of(s);
  const int64_t T = g.taps(), parts = conv_wgrad::parts_for(g);
  auto stream = c.handles().stream;
  // Returned to the cache when this goes out of scope; later work on the stream may reuse it, as
  // with cuDNN's workspace.
  ScopedBlock partials(alloc, static_cast<size_t>(parts * T) * sizeof(float));
  float* sums = partials.at<float>();
  switch (conv_wgrad::taps_per_thread(T)) {
    case 1: launch_partials<1>(stream, sums, dout, in, g, parts); break;
    case 2: launch_partials<2>(stream, sums, dout, in, g, parts); break;
    case 4: launch_partials<4>(stream, sums, dout, in, g, parts); break;
    default: launch_partials<8>(stream, sums, dout, in, g, parts); break;
  }
  wgrad_finish_kernel<<<blocks_for(T), kThreads, 0, stream>>>(dw, sums, T, parts);
  DP_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace dp::cuda
