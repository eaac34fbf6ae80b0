// A small convolution's weight gradient without cuDNN: each block a tile of taps over one part of
// the output positions, staged through shared memory, then each tap's parts added in a fixed order
// (the arithmetic, and why: kernels/conv_wgrad_parts.hpp).
#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/conv_wgrad_parts.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/conv2d.hpp"

namespace dp::cuda {

namespace {

static_assert(conv_wgrad::kThreads == kThreads, "a tile's threads are the launches' blocks");

// Block (part, tile): the tile's taps summed over the part's positions, into partials[part].
// A chunk's global loads are issued before the products of the chunk before it, to overlap them.
template <int M, int N>
__global__ void __launch_bounds__(conv_wgrad::kThreads)
    wgrad_tiles_kernel(float* partials, const float* __restrict__ dy, const float* __restrict__ x,
                       conv_wgrad::Geometry g, conv_wgrad::Plan plan) {
  constexpr int RM = M / 16, RN = N / 16;
  __shared__ __align__(16) float dys[conv_wgrad::kChunk * (M + conv_wgrad::kPad)];
  __shared__ __align__(16) float xs[conv_wgrad::kChunk * (N + conv_wgrad::kPad)];
  const int tid = threadIdx.x;
  const int64_t part = blockIdx.x;
  const int k0 = static_cast<int>(blockIdx.y / plan.tiles_n) * M, j0 = static_cast<int>(blockIdx.y % plan.tiles_n) * N;
  const auto columns = conv_wgrad::load_columns<RN>(g, j0, tid);
  const conv_wgrad::Cell cell = conv_wgrad::cell_of(tid);
  const int begin = static_cast<int>(plan.part_begin(part)), end = static_cast<int>(plan.part_begin(part + 1));
  float dy_regs[RM], x_regs[RN], acc[RM][RN];
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int j = 0; j < RN; ++j) acc[i][j] = 0.f;
  conv_wgrad::load_stage(dy_regs, x_regs, dy, x, g, columns, k0, begin, tid);
  for (int q0 = begin; q0 < end; q0 += conv_wgrad::kChunk) {
    conv_wgrad::store_stage<M, N>(dys, xs, dy_regs, x_regs, tid);
    __syncthreads();
    if (q0 + conv_wgrad::kChunk < end)
      conv_wgrad::load_stage(dy_regs, x_regs, dy, x, g, columns, k0, q0 + conv_wgrad::kChunk, tid);
    conv_wgrad::multiply_stage<M, N>(acc, dys, xs, cell);
    __syncthreads();
  }
  conv_wgrad::write_partials<M, N>(partials + part * g.taps(), acc, g, k0, j0, cell);
}

// Block b: taps 32·b .. 32·b + 31 (threadIdx.x), each summed by kFinishLanes lanes (threadIdx.y),
// then the lanes added pairwise in shared memory: conv_wgrad::tap_total's arithmetic.
__global__ void wgrad_finish_kernel(float* dw, const float* partials, int64_t taps, int64_t parts) {
  __shared__ double sums[32][conv_wgrad::kFinishLanes + 1];  // [tap][lane]; + 1: fewer bank conflicts
  const int64_t t = blockIdx.x * int64_t{32} + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.y);
  double* mine = sums[threadIdx.x];
  mine[lane] = t < taps ? conv_wgrad::lane_sum(partials, taps, parts, t, lane) : 0.0;
  __syncthreads();
  for (int half = conv_wgrad::kFinishLanes / 2; half > 0; half /= 2) {
    conv_wgrad::add_lanes_step(mine, half, lane);
    __syncthreads();
  }
  if (lane == 0 && t < taps) dw[t] = static_cast<float>(mine[0]);
}

template <int M, int N>
void launch_tiles(cudaStream_t stream, float* partials, const float* dy, const float* x, const conv_wgrad::Geometry& g,
                  const conv_wgrad::Plan& plan) {
  const dim3 grid(static_cast<unsigned>(plan.parts), static_cast<unsigned>(plan.tiles()));
  wgrad_tiles_kernel<M, N><<<grid, conv_wgrad::kThreads, 0, stream>>>(partials, dy, x, g, plan);
  DP_CUDA_CHECK_LAUNCH();
}

template <int M>
void launch_tiles_m(cudaStream_t stream, float* partials, const float* dy, const float* x,
                    const conv_wgrad::Geometry& g, const conv_wgrad::Plan& plan) {
  if (plan.tile.n == 32)
    launch_tiles<M, 32>(stream, partials, dy, x, g, plan);
  else
    launch_tiles<M, 64>(stream, partials, dy, x, g, plan);
}

}  // namespace

bool conv2d_weight_grad_direct(Context& c, ScratchMemory& alloc, float* dw, const float* dout, const float* in,
                               const ConvShape& s) {
  if (!conv_wgrad::eligible(s)) return false;
  const conv_wgrad::Geometry g = conv_wgrad::geometry_of(s);
  const conv_wgrad::Plan plan = conv_wgrad::plan_for(g);
  const int64_t T = g.taps();
  auto stream = c.handles().stream;
  // Returned to the cache when this goes out of scope; later work on the stream may reuse it, as
  // with cuDNN's workspace.
  ScopedBlock partials(alloc, static_cast<size_t>(plan.parts * T) * sizeof(float));
  float* sums = partials.at<float>();
  switch (plan.tile.m) {
    case 16: launch_tiles_m<16>(stream, sums, dout, in, g, plan); break;
    case 32: launch_tiles_m<32>(stream, sums, dout, in, g, plan); break;
    default: launch_tiles_m<64>(stream, sums, dout, in, g, plan); break;
  }
  static_assert(32 * conv_wgrad::kFinishLanes <= 1024, "a finishing block's threads");
  wgrad_finish_kernel<<<static_cast<unsigned>((T + 31) / 32), dim3(32, conv_wgrad::kFinishLanes), 0, stream>>>(
      dw, sums, T, plan.parts);
  DP_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace dp::cuda
