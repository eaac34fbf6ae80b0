#include <cblas.h>

#include "core/thread_pool.hpp"
#include "kernels/ops/batched_matmul.hpp"

namespace dp::cpu {

void batched_matmul(ThreadPool& pool, float* out, const float* a, const float* b, const MatmulShape& s) {
  const int M = static_cast<int>(s.M), K = static_cast<int>(s.K), N = static_cast<int>(s.N);
  const int lda = s.trans_a ? M : K, ldb = s.trans_b ? K : N;
  pool.parallel_for(s.batch, [=](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i)
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, M, N,
                  K, 1.f, a + i * s.M * s.K, lda, b + i * s.K * s.N, ldb, 0.f, out + i * s.M * s.N, N);
  });
}

}  // namespace dp::cpu
