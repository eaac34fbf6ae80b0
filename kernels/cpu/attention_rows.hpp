// One attention row's softmax on the CPU, shared by the explicit attention (attention.cpp) and the
// fused one's reference (attention_fused.cpp), so the two compute a probability alike.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/fast_math.hpp"

namespace dp::cpu {

// row [T]: the scores of a query into its probabilities over the first last + 1 keys (those it
// sees), zeros after. One exp per score (the vectorised one, fast_math.hpp), summed in double.
// Returns the row's log-sum-exp, max + log Σ exp(score − max).
inline float softmax_row(float* row, int64_t last, int64_t T) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j <= last; ++j) mx = std::max(mx, row[j]);
  for (int64_t j = 0; j <= last; ++j) row[j] = fast_exp(row[j] - mx);
  double sum = 0;
  for (int64_t j = 0; j <= last; ++j) sum += row[j];
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
  for (int64_t j = last + 1; j < T; ++j) row[j] = 0.f;
  return mx + static_cast<float>(std::log(sum));
}

}  // namespace dp::cpu
