// SyncBatchNorm's kernels on the host: with one chunk's own statistics and sums they are exactly
// BatchNorm's training forward and backward. (The module over several replicas is checked
// against BatchNorm over the whole batch in test_allreduce.cpp.)
#include <doctest/doctest.h>

#include <cmath>

#include "core/thread_pool.hpp"
#include "kernels/ops/batchnorm.hpp"
#include "helpers.hpp"

namespace test_sync_batchnorm {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using dp::test::random_vector;

namespace {
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}
}  // namespace

TEST_CASE("SyncBatchNorm's pieces with one chunk's statistics are BatchNorm's training step") {
  ThreadPool pool(2);
  const int64_t N = 4, C = 3, HW = 25;
  auto x = random_vector(N * C * HW, 1, -2.f, 3.f), gamma = random_vector(C, 2, 0.5f, 1.5f), beta = random_vector(C, 3),
       dy = random_vector(N * C * HW, 4);
  std::vector<float> y(x.size()), mean(C), inv(C), rm(C, 0.f), rv(C, 1.f), dx(x.size()), dg(C), db(C);
  cpu::batchnorm_forward_train(pool, y.data(), mean.data(), inv.data(), x.data(), gamma.data(), beta.data(), rm.data(),
                               rv.data(), N, C, HW, 0.1f, 1e-5f);
  cpu::batchnorm_backward(pool, dx.data(), dg.data(), db.data(), dy.data(), x.data(), gamma.data(), mean.data(),
                          inv.data(), N, C, HW, 1e-5f);

  std::vector<float> lm(C), lv(C), y2(x.size()), mean2(C), inv2(C), rm2(C, 0.f), rv2(C, 1.f), sdy(C), sdyx(C),
      dx2(x.size());
  cpu::batchnorm_stats(pool, lm.data(), lv.data(), x.data(), N, C, HW);
  cpu::batchnorm_forward_with_stats(pool, y2.data(), mean2.data(), inv2.data(), x.data(), gamma.data(), beta.data(),
                                    rm2.data(), rv2.data(), lm.data(), lv.data(), N * HW, N, C, HW, 0.1f, 1e-5f);
  cpu::batchnorm_backward_reduce(pool, sdy.data(), sdyx.data(), dy.data(), x.data(), mean2.data(), inv2.data(), N, C,
                                 HW);
  cpu::batchnorm_backward_apply(pool, dx2.data(), dy.data(), x.data(), gamma.data(), mean2.data(), inv2.data(),
                                sdy.data(), sdyx.data(), N * HW, N, C, HW);
  CHECK(max_diff(mean2, mean) < 1e-6);
  CHECK(max_diff(inv2, inv) < 1e-5);
  CHECK(max_diff(y2, y) < 1e-5);
  CHECK(max_diff(rm2, rm) < 1e-6);
  CHECK(max_diff(rv2, rv) < 1e-5);  // unbiased running variance from var·count/(count − 1)
  CHECK(max_diff(sdy, db) < 1e-5);
  CHECK(max_diff(sdyx, dg) < 1e-4);
  CHECK(max_diff(dx2, dx) < 1e-5);
}

}  // namespace test_sync_batchnorm
