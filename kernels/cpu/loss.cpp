#include <cmath>
#include <string>

#include "engine/error.hpp"
#include "kernels/ops/loss.hpp"

namespace dp::cpu {

double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                    float grad_scale, int64_t* correct) {
  double total = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < B; ++r) {
    const float* z = logits + r * K;
    const int32_t y = labels[r];
    if (y < 0 || y >= K)
      throw RuntimeError("label " + std::to_string(y) + " of sample " + std::to_string(r) + " is outside [0, " +
                         std::to_string(K) + ")");
    float mx = z[0];
    int64_t arg = 0;
    for (int64_t j = 1; j < K; ++j)
      if (z[j] > mx) mx = z[j], arg = j;
    double sum = 0;
    for (int64_t j = 0; j < K; ++j) sum += std::exp(static_cast<double>(z[j] - mx));
    const double log_sum = std::log(sum) + mx;
    total += log_sum - z[y];
    hits += arg == y;
    if (dlogits)
      for (int64_t j = 0; j < K; ++j) {
        double p = std::exp(static_cast<double>(z[j]) - log_sum);
        dlogits[r * K + j] = static_cast<float>((p - (j == y ? 1.0 : 0.0)) * grad_scale);
      }
  }
  if (correct) *correct = hits;
  return total;
}

}  // namespace dp::cpu
