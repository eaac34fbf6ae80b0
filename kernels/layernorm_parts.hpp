// How LayerNorm's CUDA backward sums dγ and dβ over the rows (kernels/cuda/transformer.cu): in
// parts of the rows (row_parts.hpp), a block per part and 32 columns (the rows of a GPT's step are
// thousands; one block per 256 columns left most SMs idle).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/row_parts.hpp"

namespace dp::layernorm_parts {

constexpr int64_t kRowsPerPart = 64;
constexpr int64_t kMaxParts = 256;

inline int64_t parts_for(int64_t rows) { return row_parts::parts_for(rows, kRowsPerPart, kMaxParts); }
using row_parts::part_begin;

// The partial sums: dγ's and dβ's, a double per part and column.
inline size_t scratch_bytes(int64_t rows, int64_t C) {
  return static_cast<size_t>(2 * parts_for(rows) * C) * sizeof(double);
}

}  // namespace dp::layernorm_parts
