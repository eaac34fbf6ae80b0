// Softmax cross-entropy's CUDA kernels (kernels/cuda/loss_kernels.cuh) run on the CPU through
// warp_emulation.hpp, launched as loss.cu launches them, against the CPU reference: the rows'
// loss, hits and gradient in one read for the max and the sum (a row longer than a warp's stride
// and not a multiple of it), label smoothing, the gradient written over the logits themselves, a
// bad label reported with nothing else lost; rows padded past their classes (the GPT's logits: the
// padding never read, its gradient written zero); float32, bfloat16 and float16 logits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops/loss.hpp"
#include "emulated_values.hpp"
#include "warp_emulation.hpp"
#include "kernels/cuda/loss_kernels.cuh"

namespace test_loss_emulated {

using namespace dp;
using namespace dp::cuda::loss_kernels;
using namespace dp::emulated;

struct Sums {
  double loss = 0, hits = 0;
  int32_t bad = 0;
};

// loss.cu's enqueue_xent: the rows, then the sums.
template <typename T>
Sums run(const T* logits, const std::vector<int32_t>& labels, int64_t K, T* dlogits, float scale, float smoothing,
         int64_t ld = 0) {
  const int64_t B = static_cast<int64_t>(labels.size());
  std::vector<double> row_loss(static_cast<size_t>(B), NAN), sums(2, NAN);
  std::vector<int32_t> row_hit(static_cast<size_t>(B), -1);
  int32_t bad = 0;
  std::vector<float> scalars(2, NAN);
  emu::launch(dim3(static_cast<unsigned>((B + kRowsPerBlock - 1) / kRowsPerBlock)), dim3(kRowsPerBlock * kWarp), 0, [&] {
    xent_rows_kernel<T>(logits, labels.data(), B, K, ld > 0 ? ld : K, dlogits, ScalarArg(scale), row_loss.data(),
                        row_hit.data(), &bad, smoothing);
  });
  emu::launch(dim3(1), dim3(kSumThreads), 0,
              [&] { sum_rows_kernel(row_loss.data(), row_hit.data(), B, sums.data(), scalars.data()); });
  CHECK(scalars[0] == static_cast<float>(sums[0]));
  return {sums[0], sums[1], bad};
}

// ld > K: the logits stored in rows ld wide, NaN in the padding (a read of it would show).
template <typename T>
void check(float smoothing, bool in_place, double tol, int64_t ld = 0) {
  CAPTURE(smoothing);
  CAPTURE(in_place);
  CAPTURE(ld);
  const int64_t B = 13, K = 300, W = ld > 0 ? ld : K;
  const auto logits = rounded<T>(random_values(static_cast<size_t>(B * K), 31, -4.f, 4.f));
  std::vector<int32_t> labels(static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) labels[static_cast<size_t>(r)] = static_cast<int32_t>((r * 37 + 5) % K);
  const auto wz = widened(logits);
  std::vector<float> want_grad(wz.size());
  int64_t want_hits = 0;
  const double want = cpu::softmax_xent(wz.data(), labels.data(), B, K, want_grad.data(), 1.f / B, &want_hits, smoothing);

  auto z = rounded<T>(std::vector<float>(static_cast<size_t>(B * W), NAN));
  for (int64_t r = 0; r < B; ++r) std::copy_n(logits.begin() + r * K, K, z.begin() + r * W);
  auto separate = unwritten<T>(z.size());
  T* grad = in_place ? z.data() : separate.data();
  const Sums got = run<T>(z.data(), labels, K, grad, 1.f / B, smoothing, ld);
  CHECK(got.bad == 0);
  CHECK(got.loss == doctest::Approx(want).epsilon(1e-5));
  CHECK(got.hits == static_cast<double>(want_hits));
  const auto g = widened(in_place ? z : separate);
  std::vector<float> rows;  // each row's K gradients; its padding written zero
  for (int64_t r = 0; r < B; ++r) {
    rows.insert(rows.end(), g.begin() + r * W, g.begin() + r * W + K);
    for (int64_t j = K; j < W; ++j) CHECK(g[static_cast<size_t>(r * W + j)] == 0.f);
  }
  CHECK(rel_error(rows, want_grad) < tol);
}

TEST_CASE("softmax cross-entropy's CUDA kernels, emulated on the CPU: the CPU reference's loss, hits and gradient") {
  for (const float smoothing : {0.f, 0.1f})
    for (const bool in_place : {false, true}) {
      check<float>(smoothing, in_place, 1e-6);
      check<emu::bfloat16>(smoothing, in_place, 2e-3);  // a gradient of at most 1/B rounded to 8 bits
      check<emu::float16>(smoothing, in_place, 2e-4);
      check<float>(smoothing, in_place, 1e-6, 320);
      check<emu::bfloat16>(smoothing, in_place, 2e-3, 320);
    }
  // a label outside [0, K): reported (1 + its row), that row's loss and hit 0, the others computed
  const int64_t K = 40;
  const auto z = random_values(static_cast<size_t>(3 * K), 32, -1.f, 1.f);
  const Sums got = run<float>(z.data(), {1, static_cast<int32_t>(K), 2}, K, nullptr, 1.f, 0.f);
  CHECK(got.bad == 2);
  std::vector<float> good(z.begin(), z.begin() + K);
  good.insert(good.end(), z.begin() + 2 * K, z.end());
  CHECK(got.loss == doctest::Approx(cpu::softmax_xent(good.data(), std::vector<int32_t>{1, 2}.data(), 2, K, nullptr,
                                                      1.f, nullptr)).epsilon(1e-6));
}

}  // namespace test_loss_emulated
