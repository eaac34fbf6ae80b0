// The bias written block by block; backward's sums over the windows in double, then each table
// entry's pairs gathered (the same order on every backend: the pairs by query row).
#include "kernels/ops/relative_position.hpp"

#include <vector>

#include "core/thread_pool.hpp"

namespace dp::cpu {

void relative_bias_forward(ThreadPool& pool, float* bias, const float* table, const RelativeBiasShape& s) {
  const int64_t T = s.tokens(), H = s.heads;
  pool.parallel_for(s.blocks() * H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t block = p / H, h = p % H;
      float* out = bias + p * T * T;
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) out[i * T + j] = table[s.index(i, j) * H + h] + s.mask(block, i, j);
    }
  });
}

void relative_bias_backward(ThreadPool& pool, float* dtable, float* sums, const float* dscores, int64_t n,
                            const RelativeBiasShape& s) {
  const int64_t T = s.tokens(), H = s.heads, per = H * T * T;
  pool.parallel_for(per, [&](int64_t e0, int64_t e1) {
    std::vector<double> acc(static_cast<size_t>(e1 - e0), 0.0);
    for (int64_t w = 0; w < n; ++w)
      for (int64_t e = e0; e < e1; ++e) acc[static_cast<size_t>(e - e0)] += dscores[w * per + e];
    for (int64_t e = e0; e < e1; ++e) sums[e] = static_cast<float>(acc[static_cast<size_t>(e - e0)]);
  });
  pool.parallel_for(s.table_rows() * H, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r = p / H, h = p % H;
      const int64_t dy = r / (2 * s.ww - 1) - (s.wh - 1), dx = r % (2 * s.ww - 1) - (s.ww - 1);
      double total = 0;
      for (int64_t yi = 0; yi < s.wh; ++yi)
        for (int64_t xi = 0; xi < s.ww; ++xi) {
          const int64_t yj = yi - dy, xj = xi - dx;
          if (yj >= 0 && yj < s.wh && xj >= 0 && xj < s.ww)
            total += sums[(h * T + yi * s.ww + xi) * T + yj * s.ww + xj];
        }
      dtable[p] = static_cast<float>(total);
    }
  });
}

}  // namespace dp::cpu
