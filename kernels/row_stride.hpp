// Rows stored wider than their columns (a GPT's padded logits: Linear's output, the loss's input):
// the stride an op takes, 0 meaning the columns' own width.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.hpp"

namespace dp {

// RuntimeError naming `op` for no columns, or rows closer together than their columns.
inline int64_t row_stride(const char* op, int64_t columns, int64_t stride) {
  if (columns < 1 || (stride != 0 && stride < columns))
    throw RuntimeError(std::string(op) + ": rows " + std::to_string(stride) + " apart hold no " +
                       std::to_string(columns) + " columns");
  return stride == 0 ? columns : stride;
}

}  // namespace dp
