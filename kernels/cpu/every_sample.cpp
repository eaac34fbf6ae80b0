#include "kernels/ops/every_sample.hpp"

#include <vector>

#include "core/thread_pool.hpp"

namespace dp::cpu {

void add_every_sample(ThreadPool& pool, float* y, const float* x, int64_t rows, int64_t n) {
  pool.parallel_for(rows, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t i = 0; i < n; ++i) y[r * n + i] += x[i];
  });
}

void mul_every_sample(ThreadPool& pool, float* out, const float* a, const float* b, int64_t rows, int64_t planes,
                      int64_t size, bool b_per_plane) {
  pool.parallel_for(rows * planes, [=](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t p = q % planes;
      for (int64_t s = 0; s < size; ++s) out[q * size + s] = a[q * size + s] * (b_per_plane ? b[p] : b[p * size + s]);
    }
  });
}

void sum_samples(ThreadPool& pool, float* out, const float* in, int64_t rows, int64_t n) {
  pool.parallel_for(n, [=](int64_t i0, int64_t i1) {
    std::vector<double> acc(static_cast<size_t>(i1 - i0), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = i0; i < i1; ++i) acc[static_cast<size_t>(i - i0)] += in[r * n + i];
    for (int64_t i = i0; i < i1; ++i) out[i] = static_cast<float>(acc[static_cast<size_t>(i - i0)]);
  });
}

}  // namespace dp::cpu
