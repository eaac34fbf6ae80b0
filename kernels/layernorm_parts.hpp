// How LayerNorm's CUDA backward sums dγ and dβ over the rows (kernels/cuda/transformer.cu): the
// rows cut into parts, a block per part and 32 columns, each block's sums written to scratch in
// double, then each column's parts added in order — every SM busy (the rows of a GPT's step are
// thousands; one block per 256 columns left most SMs idle) and the same bits every run. Host code
// too: the parts depend on the shape only (never on the GPU), the CPU tests check they cover every
// row once, and every device holds the same scratch for the op, so a plan's memory is a GPU's.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/scalar_arg.hpp"  // DP_HOST_DEVICE

namespace dp::layernorm_parts {

constexpr int64_t kRowsPerPart = 64;
constexpr int64_t kMaxParts = 256;

inline int64_t parts_for(int64_t rows) { return std::clamp<int64_t>((rows + kRowsPerPart - 1) / kRowsPerPart, 1, kMaxParts); }

// Part p of P covers rows [part_begin(p), part_begin(p + 1)).
DP_HOST_DEVICE inline int64_t part_begin(int64_t rows, int64_t p, int64_t P) { return rows * p / P; }

// The partial sums: dγ's and dβ's, a double per part and column.
inline size_t scratch_bytes(int64_t rows, int64_t C) {
  return static_cast<size_t>(2 * parts_for(rows) * C) * sizeof(double);
}

}  // namespace dp::layernorm_parts
