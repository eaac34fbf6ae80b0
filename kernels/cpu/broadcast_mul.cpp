#include "kernels/ops/broadcast_mul.hpp"

#include "core/thread_pool.hpp"

namespace dp::cpu {

void mul_planes(ThreadPool& pool, float* out, const float* a, const float* b, int64_t planes, int64_t size,
                bool b_per_plane) {
  pool.parallel_for(planes, [=](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t s = 0; s < size; ++s) {
        const int64_t i = p * size + s;
        out[i] = a[i] * (b_per_plane ? b[p] : b[i]);
      }
  });
}

void plane_dot(ThreadPool& pool, float* out, const float* g, const float* a, int64_t planes, int64_t size) {
  pool.parallel_for(planes, [=](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      double sum = 0;
      for (int64_t s = 0; s < size; ++s) sum += static_cast<double>(g[p * size + s]) * a[p * size + s];
      out[p] = static_cast<float>(sum);
    }
  });
}

}  // namespace dp::cpu
