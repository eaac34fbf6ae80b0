// How the CUDA column sums of a row-major [rows, cols] matrix (Linear's bias gradient,
// kernels/cuda/column_sum.cuh) cut the rows into parts when there are many: a block per part and
// 32 columns, each block's sums written to scratch in double, then each column's parts added in
// order — every SM busy (a GPT step's thousands of rows over 768 columns made 24 blocks) and the
// same bits every run. Host code too: the parts depend on the shape only (never on the GPU), the
// CPU tests check they cover every row once, and every device holds the same scratch for the op, so
// a plan's memory is a GPU's. Up to kRowsPerPart rows stay one part and take no scratch.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/scalar_arg.hpp"  // DP_HOST_DEVICE

namespace dp::column_parts {

constexpr int64_t kRowsPerPart = 1024;
constexpr int64_t kMaxParts = 64;

inline int64_t parts_for(int64_t rows) { return std::clamp<int64_t>((rows + kRowsPerPart - 1) / kRowsPerPart, 1, kMaxParts); }

// Part p of P covers rows [part_begin(p), part_begin(p + 1)).
DP_HOST_DEVICE inline int64_t part_begin(int64_t rows, int64_t p, int64_t P) { return rows * p / P; }

// The partial sums, a double per part and column; none for one part.
inline size_t scratch_bytes(int64_t rows, int64_t cols) {
  const int64_t parts = parts_for(rows);
  return parts > 1 ? static_cast<size_t>(parts * cols) * sizeof(double) : 0;
}

}  // namespace dp::column_parts
