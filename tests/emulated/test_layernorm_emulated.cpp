// LayerNorm's CUDA kernels (kernels/cuda/layernorm_kernels.cuh) run on the CPU through
// warp_emulation.hpp, launched as transformer.cu launches them, and held to the CPU reference as
// tests/gpu/test_cuda_kernels.cpp holds the GPU's: the forward, and the backward in one pass for
// every width it holds (4 to 32 columns a lane) and as dx + the parts kernel beyond, over several
// parts of the rows — float32 and bfloat16.
#include <doctest/doctest.h>

#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/layernorm_parts.hpp"
#include "kernels/ops/transformer.hpp"
#include "emulated_values.hpp"
#include "warp_emulation.hpp"
#include "kernels/cuda/layernorm_kernels.cuh"

namespace test_layernorm_emulated {

using namespace dp;
using namespace dp::cuda::layernorm_kernels;
using namespace dp::emulated;

template <typename T>
void check(int64_t rows, int64_t C, double tol) {
  CAPTURE(rows);
  CAPTURE(C);
  const auto x = rounded<T>(random_values(static_cast<size_t>(rows * C), 11 + C, -2.f, 2.f));
  const auto dy = rounded<T>(random_values(static_cast<size_t>(rows * C), 12 + C, -1.f, 1.f));
  const auto gamma = rounded<T>(random_values(static_cast<size_t>(C), 13, 0.5f, 1.5f));
  const auto beta = rounded<T>(random_values(static_cast<size_t>(C), 14, -0.5f, 0.5f));
  const auto wx = widened(x), wdy = widened(dy), wg = widened(gamma), wb = widened(beta);
  ThreadPool pool(1);
  std::vector<float> y(wx.size()), mean(static_cast<size_t>(rows)), rstd(mean.size()), dx(wx.size()),
      dg(static_cast<size_t>(C)), db(dg.size());
  cpu::layernorm_forward(pool, y.data(), mean.data(), rstd.data(), wx.data(), wg.data(), wb.data(), rows, C, 1e-5f);
  cpu::layernorm_backward(pool, dx.data(), dg.data(), db.data(), wdy.data(), wx.data(), wg.data(), mean.data(),
                          rstd.data(), rows, C);

  // transformer.cu's launches
  auto got_y = unwritten<T>(wx.size());
  auto got_mean = unwritten<float>(mean.size()), got_rstd = unwritten<float>(mean.size());
  emu::launch(dim3(static_cast<unsigned>((rows + 7) / 8)), dim3(32, 8), 0, [&] {
    layernorm_forward_kernel<T>(got_y.data(), got_mean.data(), got_rstd.data(), x.data(), gamma.data(), beta.data(), rows,
                                C, 1e-5f);
  });
  CHECK(rel_error(widened(got_y), y) < tol);
  CHECK(rel_error(got_mean, mean) < 1e-5);
  CHECK(rel_error(got_rstd, rstd) < 1e-4);

  const int64_t parts = layernorm_parts::parts_for(rows);
  std::vector<double> part_dg(static_cast<size_t>(parts * C), NAN), part_db(part_dg.size(), NAN);
  auto got_dx = unwritten<T>(wx.size()), got_dg = unwritten<T>(dg.size()), got_db = unwritten<T>(db.size());
  if (C <= int64_t{32} * kMaxPerLane) {
    with_lanes_for(C, [&](auto lanes) {
      emu::launch(dim3(static_cast<unsigned>(parts)), dim3(kPartCols, kPartRows), 0, [&] {
        layernorm_backward_one_pass_kernel<T, decltype(lanes)::value>(got_dx.data(), part_dg.data(), part_db.data(),
                                                                      dy.data(), x.data(), gamma.data(), mean.data(),
                                                                      rstd.data(), rows, C, parts);
      });
    });
  } else {
    emu::launch(dim3(static_cast<unsigned>((rows + kPartRows - 1) / kPartRows)), dim3(32, kPartRows), 0, [&] {
      layernorm_dx_kernel<T>(got_dx.data(), dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), rows, C);
    });
    emu::launch(dim3(static_cast<unsigned>((C + kPartCols - 1) / kPartCols), static_cast<unsigned>(parts)),
                dim3(kPartCols, kPartRows), 0, [&] {
                  layernorm_dparams_parts_kernel<T>(part_dg.data(), part_db.data(), dy.data(), x.data(), mean.data(),
                                                    rstd.data(), rows, C, parts);
                });
  }
  emu::launch(dim3(static_cast<unsigned>((C + 255) / 256)), dim3(256), 0, [&] {
    layernorm_dparams_sum_kernel<T>(got_dg.data(), got_db.data(), part_dg.data(), part_db.data(), C, parts);
  });
  CHECK(rel_error(widened(got_dx), dx) < tol);
  CHECK(rel_error(widened(got_dg), dg) < tol);
  CHECK(rel_error(widened(got_db), db) < tol);
}

TEST_CASE("LayerNorm's CUDA kernels, emulated on the CPU: the CPU reference's output, statistics and gradients") {
  // one-pass widths (4, 8, 16, 24, 32 columns a lane) and beyond; 200 rows: 4 parts of the rows
  for (const int64_t C : {70, 129, 500, 768, 1024, 1025})
    for (const int64_t rows : {1, 200}) {
      check<float>(rows, C, 1e-5);
      check<emu::bfloat16>(rows, C, 1e-2);  // a 16-bit result: the float32 one rounded (and the sums' order)
    }
}

}  // namespace test_layernorm_emulated
