// db[j] = Σ_r dout[r, j] over a row-major [B, O] matrix (Linear's bias gradient; rows `ld` apart, 0: O), in double,
// rounded once to the storage type. A block covers 32 columns with 32 rows of threads: a warp
// reads 32 adjacent columns of a row (coalesced), each thread sums every 32nd row, and the 32
// partial sums of a column are added by a fixed tree — the same bits every run, and B/32 dependent
// loads a thread instead of B (one thread per column made the batch's rows a serial chain). With
// scratch for many rows (kernels/column_parts.hpp) a block per part of the rows as well, the
// parts' sums then added in order: every SM busy.
#pragma once
#include <cstdint>

#include "core/cuda/check.cuh"
#include "kernels/column_parts.hpp"
#include "kernels/cuda/half.cuh"

namespace dp::cuda {

namespace column_sum_detail {
constexpr int kCols = 32, kRows = 32;

// Block (x, p): columns 32x.., rows of part p of gridDim.y, summed into parts[p·O + j] — or, for
// one part, rounded into db[j].
template <typename T, typename TIn>
__global__ void column_sum_kernel(T* db, double* parts, const TIn* dout, int64_t B, int64_t O, int64_t ld) {
  __shared__ double part[kRows][kCols + 1];  // +1: the column-wise tree reads without bank conflicts
  const int64_t j = blockIdx.x * int64_t{kCols} + threadIdx.x, p = blockIdx.y, P = gridDim.y;
  const int64_t begin = column_parts::part_begin(B, p, P), end = column_parts::part_begin(B, p + 1, P);
  double s = 0;
  if (j < O)
    for (int64_t r = begin + threadIdx.y; r < end; r += kRows) s += load_float(dout[r * ld + j]);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int half = kRows / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) part[threadIdx.y][threadIdx.x] += part[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y != 0 || j >= O) return;
  if (P == 1) db[j] = store_as<T>(static_cast<float>(part[0][threadIdx.x]));
  else parts[p * O + j] = part[0][threadIdx.x];
}

// Each column's parts added in order, rounded once.
template <typename T>
__global__ void column_parts_add_kernel(T* db, const double* parts, int64_t O, int64_t P) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < O; j += int64_t{gridDim.x} * blockDim.x) {
    double s = 0;
    for (int64_t p = 0; p < P; ++p) s += parts[p * O + j];
    db[j] = store_as<T>(static_cast<float>(s));
  }
}
}  // namespace column_sum_detail

// The sums stored as T, the rows read as TIn (16-bit rows summed into float32: a gradient over
// samples). `parts`: column_parts::scratch_bytes(B, O) of device memory, or null for one block a
// column group whatever B (the callers that sum few rows).
template <typename T, typename TIn = T>
void column_sum(Context& c, T* db, const TIn* dout, int64_t B, int64_t O, double* parts = nullptr, int64_t ld = 0) {
  using namespace column_sum_detail;
  if (O == 0) return;
  const int64_t P = parts ? column_parts::parts_for(B) : 1;
  const dim3 block(kCols, kRows), grid(static_cast<unsigned>((O + kCols - 1) / kCols), static_cast<unsigned>(P));
  column_sum_kernel<<<grid, block, 0, c.handles().stream>>>(db, parts, dout, B, O, ld > 0 ? ld : O);
  DP_CUDA_CHECK_LAUNCH();
  if (P == 1) return;
  column_parts_add_kernel<<<static_cast<unsigned>((O + 255) / 256), 256, 0, c.handles().stream>>>(db, parts, O, P);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
