// Grid sizes for the element-wise kernels: blocks of kThreads, at most 65535 of them (the kernels
// stride over the rest), so one definition serves every .cu file.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>

namespace dp::cuda {

constexpr int kThreads = 256;
// per_thread: elements each thread takes in one pass (a kernel that unrolls its grid-stride loop).
inline unsigned blocks_for(int64_t n, int per_thread = 1) {
  const int64_t per_block = int64_t{kThreads} * per_thread;
  return static_cast<unsigned>(std::min<int64_t>((n + per_block - 1) / per_block, 65535));
}

// Index arithmetic in 32 bits where every index of the launch fits, with room for one grid stride
// past the end (a blocks_for grid): a 64-bit division or remainder costs several times a 32-bit
// one, and a kernel that splits a flat index into (plane, row, column) does a few per element.
// f(I{}) with I = int32_t or int64_t; `largest` is the largest element count the kernel indexes,
// `per_thread` the grid strides a thread's index moves in one pass (blocks_for's argument).
template <typename F>
void with_index_type(int64_t largest, F&& f, int per_thread = 1) {
  constexpr int64_t kLargestGrid = int64_t{65535} * kThreads;
  if (largest <= int64_t{INT32_MAX} - kLargestGrid * per_thread) f(int32_t{});
  else f(int64_t{});
}

}  // namespace dp::cuda
