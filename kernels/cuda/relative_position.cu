// The relative position bias (kernels/ops/relative_position.hpp): a thread a bias element
// forward; backward the windows' sum by column_sum (a fixed order), then a thread a table entry
// gathering its pairs in the CPU reference's order.
#include "core/cuda/check.cuh"
#include "core/cuda/context.hpp"
#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/relative_position.hpp"

namespace dp::cuda {

namespace {

__global__ void bias_kernel(float* bias, const float* table, RelativeBiasShape s, int64_t n) {
  const int64_t T = s.tokens();
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e % T, i = e / T % T, h = e / (T * T) % s.heads, block = e / (T * T * s.heads);
    bias[e] = table[s.index(i, j) * s.heads + h] + s.mask(block, i, j);
  }
}

__global__ void gather_kernel(float* dtable, const float* sums, RelativeBiasShape s) {
  const int64_t T = s.tokens(), n = s.table_rows() * s.heads;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n; p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = p / s.heads, h = p % s.heads;
    const int64_t dy = r / (2 * s.ww - 1) - (s.wh - 1), dx = r % (2 * s.ww - 1) - (s.ww - 1);
    double total = 0;
    for (int64_t yi = 0; yi < s.wh; ++yi)
      for (int64_t xi = 0; xi < s.ww; ++xi) {
        const int64_t yj = yi - dy, xj = xi - dx;
        if (yj >= 0 && yj < s.wh && xj >= 0 && xj < s.ww) total += sums[(h * T + yi * s.ww + xi) * T + yj * s.ww + xj];
      }
    dtable[p] = static_cast<float>(total);
  }
}

}  // namespace

void relative_bias_forward(Context& c, float* bias, const float* table, const RelativeBiasShape& s) {
  const int64_t n = s.blocks() * s.heads * s.tokens() * s.tokens();
  if (n == 0) return;
  bias_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(bias, table, s, n);
  DP_CUDA_CHECK_LAUNCH();
}

void relative_bias_backward(Context& c, float* dtable, float* sums, const float* dscores, int64_t n,
                            const RelativeBiasShape& s) {
  const int64_t per = s.heads * s.tokens() * s.tokens(), rows = s.table_rows() * s.heads;
  if (per == 0) return;
  column_sum(c, sums, dscores, n, per);
  gather_kernel<<<blocks_for(rows), kThreads, 0, c.handles().stream>>>(dtable, sums, s);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
