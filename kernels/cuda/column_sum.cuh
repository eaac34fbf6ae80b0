// db[j] = Σ_r dout[r, j] over a row-major [B, O] matrix (Linear's bias gradient), in double,
// rounded once to the storage type. A block covers 32 columns with 32 rows of threads: a warp
// reads 32 adjacent columns of a row (coalesced), each thread sums every 32nd row, and the 32
// partial sums of a column are added by a fixed tree — the same bits every run, and B/32 dependent
// loads a thread instead of B (one thread per column made the batch's rows a serial chain).
#pragma once
#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"

namespace dp::cuda {

namespace column_sum_detail {
constexpr int kCols = 32, kRows = 32;

template <typename T, typename TIn>
__global__ void column_sum_kernel(T* db, const TIn* dout, int64_t B, int64_t O) {
  __shared__ double part[kRows][kCols + 1];  // +1: the column-wise tree reads without bank conflicts
  const int64_t j = blockIdx.x * int64_t{kCols} + threadIdx.x;
  double s = 0;
  if (j < O)
    for (int64_t r = threadIdx.y; r < B; r += kRows) s += load_float(dout[r * O + j]);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int half = kRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < O) db[j] = store_as<T>(static_cast<float>(part[0][threadIdx.x]));
}
}  // namespace column_sum_detail

// The sums stored as T, the rows read as TIn (16-bit rows summed into float32: a gradient over samples).
template <typename T, typename TIn = T>
void column_sum(Context& c, T* db, const TIn* dout, int64_t B, int64_t O) {
  using namespace column_sum_detail;
  if (O == 0) return;
  const dim3 block(kCols, kRows);
  column_sum_kernel<<<static_cast<unsigned>((O + kCols - 1) / kCols), block, 0, c.handles().stream>>>(db, dout, B, O);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
