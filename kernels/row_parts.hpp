// Rows cut into parts, for the CUDA column sums that keep every SM busy (LayerNorm's dγ and dβ,
// layernorm_parts.hpp; Linear's bias gradient, column_parts.hpp): a block per part and 32 columns,
// each block's sums written to scratch in double, then each column's parts added in order — the
// same bits every run. Host code too: the parts depend on the shape only (never on the GPU), the
// CPU tests check they cover every row once, and every device holds the same scratch for the op,
// so a plan's memory is a GPU's.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/scalar_arg.hpp"  // DP_HOST_DEVICE

namespace dp::row_parts {

// Parts of about rows_per_part rows: at least one, at most max_parts.
inline int64_t parts_for(int64_t rows, int64_t rows_per_part, int64_t max_parts) {
  return std::clamp<int64_t>((rows + rows_per_part - 1) / rows_per_part, 1, max_parts);
}

// Part p of P covers rows [part_begin(p), part_begin(p + 1)).
DP_HOST_DEVICE inline int64_t part_begin(int64_t rows, int64_t p, int64_t P) { return rows * p / P; }

}  // namespace dp::row_parts
