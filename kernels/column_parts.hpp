// How the CUDA column sums of a row-major [rows, cols] matrix (Linear's bias gradient,
// kernels/cuda/column_sum.cuh) cut many rows into parts (row_parts.hpp): a GPT step's thousands of
// rows over 768 columns made 24 blocks. Up to kRowsPerPart rows stay one part and take no scratch.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/row_parts.hpp"

namespace dp::column_parts {

constexpr int64_t kRowsPerPart = 1024;
constexpr int64_t kMaxParts = 64;

inline int64_t parts_for(int64_t rows) { return row_parts::parts_for(rows, kRowsPerPart, kMaxParts); }
using row_parts::part_begin;

// The partial sums, a double per part and column; none for one part.
inline size_t scratch_bytes(int64_t rows, int64_t cols) {
  const int64_t parts = parts_for(rows);
  return parts > 1 ? static_cast<size_t>(parts * cols) * sizeof(double) : 0;
}

}  // namespace dp::column_parts
