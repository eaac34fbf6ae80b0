// Embedding's backward without atomics, so that it gives the same bits every run (PyTorch's CUDA
// embedding backward sorts too): a stable radix sort groups the rows by id, keeping row order
// within an id; then one thread per (id's first sorted position, column) sums that id's rows in
// row order — the CPU reference's order, so the two agree bit for bit. On 16-bit gradients (half.cuh)
// the same float32 sums of the loaded values, rounded once on store: the widened path's bits
// without its copies (a GPT's table gradient is its largest). Its own file: CUB costs compile time
// and memory that no other kernel file should pay.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>

#include "core/cuda/check.cuh"
#include "core/scratch.hpp"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/id_check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/transformer.hpp"

namespace dp::cuda {

namespace {

__global__ void check_ids_and_number_rows(const int32_t* ids, int32_t* row_numbers, int64_t rows, int64_t V,
                                          unsigned long long* fault) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows; r += int64_t{gridDim.x} * blockDim.x) {
    if (ids[r] < 0 || ids[r] >= V) report_bad_id(fault, r, ids[r], V);
    row_numbers[r] = static_cast<int32_t>(r);
  }
}

// k = sorted position × C + column; only an id's first sorted position does the sum. An id outside
// [0, V) (reported already; the sort saw only its low bits) writes nothing.
template <typename T>
__global__ void sum_sorted_rows(T* dtable, const T* dout, const int32_t* sorted_ids, const int32_t* sorted_rows,
                                int64_t rows, int64_t V, int64_t C) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < rows * C; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = k / C, col = k % C;
    const int32_t id = sorted_ids[p];
    if (id < 0 || id >= V || (p > 0 && sorted_ids[p - 1] == id)) continue;
    float sum = 0.f;  // 0 + the first row + ...: the CPU's order from its zeroed table
    for (int64_t q = p; q < rows && sorted_ids[q] == id; ++q) sum += load_float(dout[sorted_rows[q] * C + col]);
    dtable[id * C + col] = store_as<T>(sum);
  }
}

int bits_for(int64_t V) {
  int bits = 1;
  while (bits < 31 && (int64_t{1} << bits) < V) ++bits;
  return bits;
}

template <typename T>
void sum_by_id(Context& c, ScratchMemory& alloc, T* dtable, const T* dout, const int32_t* ids, int64_t rows, int64_t V,
               int64_t C) {
  cudaStream_t s = c.handles().stream;
  DP_CUDA_CHECK(cudaMemsetAsync(dtable, 0, static_cast<size_t>(V * C) * sizeof(T), s));
  if (rows * C == 0) return;
  const int n = static_cast<int>(rows);
  size_t sort_bytes = 0;
  DP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), n, 0, bits_for(V), s));
  // Three arrays of `rows` int32 (row numbers, sorted ids, sorted rows), 256-byte aligned, then CUB's.
  const size_t array = (static_cast<size_t>(rows) * sizeof(int32_t) + 255) / 256 * 256;
  ScopedBlock scratch(alloc, 3 * array + sort_bytes);
  auto* row_numbers = scratch.at<int32_t>(0);
  auto* sorted_ids = scratch.at<int32_t>(array);
  auto* sorted_rows = scratch.at<int32_t>(2 * array);
  void* sort_temp = scratch.at<void>(3 * array);
  check_ids_and_number_rows<<<blocks_for(rows), kThreads, 0, s>>>(ids, row_numbers, rows, V, c.handles().data_fault);
  DP_CUDA_CHECK_LAUNCH();
  after_id_check(c);
  DP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, ids, sorted_ids, row_numbers, sorted_rows, n, 0,
                                                bits_for(V), s));
  sum_sorted_rows<T><<<blocks_for(rows * C), kThreads, 0, s>>>(dtable, dout, sorted_ids, sorted_rows, rows, V, C);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_backward(Context& c, ScratchMemory& alloc, float* dtable, const float* dout, const int32_t* ids,
                        int64_t rows, int64_t V, int64_t C) {
  sum_by_id(c, alloc, dtable, dout, ids, rows, V, C);
}

void embedding_backward(Context& c, ScratchMemory& alloc, DType t, void* dtable, const void* dout, const int32_t* ids,
                        int64_t rows, int64_t V, int64_t C) {
  with_float_type(t, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    sum_by_id(c, alloc, static_cast<T*>(dtable), static_cast<const T*>(dout), ids, rows, V, C);
  });
}

}  // namespace dp::cuda
