#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/ops/linear.hpp"
#include "core/thread_pool.hpp"

namespace dp::cpu {

void linear_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b, int64_t B,
                    int64_t I, int64_t O, int64_t ldo) {
  // Rows of the batch split across the device's threads; each part one sgemm.
  pool.parallel_for(B, [&](int64_t r0, int64_t r1) {
    float* o = out + r0 * ldo;
    for (int64_t r = r0; r < r1; ++r) {
      float* row = o + (r - r0) * ldo;
      for (int64_t j = 0; j < O; ++j) row[j] = b ? b[j] : 0.f;
      std::fill(row + O, row + ldo, 0.f);  // the padding
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(r1 - r0), static_cast<int>(O),
                static_cast<int>(I), 1.f, in + r0 * I, static_cast<int>(I), w, static_cast<int>(I), 1.f, o,
                static_cast<int>(ldo));
  });
}

void linear_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, int64_t B, int64_t I, int64_t O, int64_t ldo) {
  if (din)
    pool.parallel_for(B, [&](int64_t r0, int64_t r1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(r1 - r0), static_cast<int>(I),
                  static_cast<int>(O), 1.f, dout + r0 * ldo, static_cast<int>(ldo), w, static_cast<int>(I), 0.f,
                  din + r0 * I, static_cast<int>(I));
    });
  // dW[O, I] = dout^T[O, B] · in[B, I]; split over output rows.
  pool.parallel_for(O, [&](int64_t o0, int64_t o1) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(o1 - o0), static_cast<int>(I),
                static_cast<int>(B), 1.f, dout + o0, static_cast<int>(ldo), in, static_cast<int>(I), 0.f, dw + o0 * I,
                static_cast<int>(I));
    if (db) {
      // Row by row (contiguous reads), each column summed in order in double.
      std::vector<double> sums(static_cast<size_t>(o1 - o0), 0.0);
      for (int64_t r = 0; r < B; ++r) {
        const float* row = dout + r * ldo + o0;
        for (int64_t j = 0; j < o1 - o0; ++j) sums[static_cast<size_t>(j)] += row[j];
      }
      for (int64_t j = o0; j < o1; ++j) db[j] = static_cast<float>(sums[static_cast<size_t>(j - o0)]);
    }
  });
}

}  // namespace dp::cpu
