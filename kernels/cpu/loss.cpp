#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "kernels/cpu/fast_math.hpp"
#include "kernels/ops/loss.hpp"

namespace dp::cpu {

namespace {

// Σ_j exp(z[j] − mx) over one row, the exps also stored in `e` when it is not null (it may be z
// itself). The vectorised float32 exp (fast_math.hpp) in blocks, summed in double over explicit
// lanes (GCC vectorises those without reassociating): a language model's rows are its vocabulary
// long, and libm's scalar double exp twice per logit made the loss cost more than the GEMM before it.
double row_exp_sum(const float* z, int64_t K, float mx, float* e) {
  constexpr int kBlock = 64, kLanes = 8;
  double lane[kLanes] = {};
  float block[kBlock];
  for (int64_t j0 = 0; j0 < K; j0 += kBlock) {
    const int64_t m = K - j0 < kBlock ? K - j0 : kBlock;
    for (int64_t i = 0; i < m; ++i) block[i] = fast_exp(z[j0 + i] - mx);
    for (int64_t i = m; i < kBlock; ++i) block[i] = 0.f;
    for (int i = 0; i < kBlock; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += block[i + l];
    if (e)
      for (int64_t i = 0; i < m; ++i) e[j0 + i] = block[i];
  }
  double sum = 0;
  for (double v : lane) sum += v;
  return sum;
}

}  // namespace

double softmax_xent(const float* logits, const int32_t* labels, int64_t B, int64_t K, float* dlogits,
                    float grad_scale, int64_t* correct, float label_smoothing, int64_t pitch) {
  const int64_t ld = pitch > 0 ? pitch : K;
  const double eps = label_smoothing, off = eps / static_cast<double>(K);  // the target's share of every class
  double total = 0;
  int64_t hits = 0;
  for (int64_t r = 0; r < B; ++r) {
    const float* z = logits + r * ld;
    const int32_t y = labels[r];
    if (y < 0 || y >= K)
      throw RuntimeError("label " + std::to_string(y) + " of sample " + std::to_string(r) + " is outside [0, " +
                         std::to_string(K) + ")");
    float mx = z[0];
    int64_t arg = 0;
    for (int64_t j = 1; j < K; ++j)
      if (z[j] > mx) mx = z[j], arg = j;
    const float zy = z[y];  // read before the row may be overwritten (dlogits may be logits)
    double zsum = 0;        // label smoothing: Σ_k z_k, for mean_k(−log p_k) = lse − mean(z)
    if (eps > 0)
      for (int64_t j = 0; j < K; ++j) zsum += z[j];
    float* g = dlogits ? dlogits + r * ld : nullptr;
    const double sum = row_exp_sum(z, K, mx, g);
    const double lse = std::log(sum) + mx;
    total += eps > 0 ? (1.0 - eps) * (lse - zy) + eps * (lse - zsum / static_cast<double>(K)) : lse - zy;
    hits += arg == y;
    if (g && eps > 0) {  // (softmax − (1 − ε)·onehot − ε/K)·scale
      const double ey = g[y];
      for (int64_t j = 0; j < K; ++j) g[j] = static_cast<float>((g[j] / sum - off) * grad_scale);
      g[y] = static_cast<float>((ey / sum - (1.0 - eps) - off) * grad_scale);
    } else if (g) {  // (softmax − onehot)·scale, softmax = exp(z − mx) / sum
      const double ey = g[y];
      const float scale = static_cast<float>(grad_scale / sum);
      for (int64_t j = 0; j < K; ++j) g[j] *= scale;
      g[y] = static_cast<float>((ey / sum - 1.0) * grad_scale);  // in double: p_y is often close to 1
    }
    if (g) std::fill(g + K, g + ld, 0.f);  // the padding's
  }
  if (correct) *correct = hits;
  return total;
}

}  // namespace dp::cpu
