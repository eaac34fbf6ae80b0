// The fused attention's CUDA kernels (kernels/cuda/attention_fused_kernels.cuh) run on the CPU
// through warp_emulation.hpp: the very tiling, indexing and synchronisation a GPU runs, held to the
// CPU reference (kernels/cpu/attention_fused.cpp) as tests/gpu/test_cuda_kernels.cpp holds the GPU's
// — causal or not, sequences that are and are not whole tiles, heads of 32 and 64, bfloat16 and
// float16, with and without the 16-byte loads, every element written. Launched as
// attention_fused.cu launches them (its grid, block and shared memory sizes).
#include <doctest/doctest.h>

#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/ops/attention_fused.hpp"
#include "emulated_values.hpp"
#include "warp_emulation.hpp"

#include "kernels/cuda/attention_fused_kernels.cuh"

namespace test_attention_fused_emulated {

using namespace dp;
using namespace dp::cuda::attention_fused_kernels;
using namespace dp::emulated;

template <typename T, int HS>
void check_shape(const AttentionShape& s, bool vector) {
  const int64_t BTC = s.B * s.T * s.C, rows = s.B * s.H * s.T;
  const auto qkv = rounded<T>(random_values(static_cast<size_t>(3 * BTC), 93 + s.T, -2.f, 2.f));
  const auto dout = rounded<T>(random_values(static_cast<size_t>(BTC), 94 + s.T, -1.f, 1.f));
  const auto wq = widened(qkv), wdy = widened(dout);
  ThreadPool pool(1);
  std::vector<float> y(static_cast<size_t>(BTC)), lse(static_cast<size_t>(rows)), dqkv(static_cast<size_t>(3 * BTC));
  cpu::attention_fused_forward(pool, y.data(), lse.data(), wq.data(), s);

  // attention_fused.cu's forward
  auto got_y = unwritten<T>(static_cast<size_t>(BTC));
  auto got_lse = unwritten<float>(static_cast<size_t>(rows));
  const dim3 grid(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>((s.T + kTile - 1) / kTile));
  emu::launch(grid, dim3(kBlockThreads), forward_smem<T, HS>(), [&] {
    fused_forward<T, HS>(got_y.data(), got_lse.data(), qkv.data(), s.T, s.H, s.C, s.score_scale(), s.causal, vector);
  });
  const double tol = std::is_same_v<T, emu::bfloat16> ? 3e-2 : 6e-3;  // the GPU case's
  CHECK(rel_error(widened(got_y), y) < tol);
  CHECK(rel_error(got_lse, lse) < 1e-5);

  // backward from the output as stored, as the kernels read it
  const auto y16 = widened(got_y);
  cpu::attention_fused_backward(pool, dqkv.data(), wdy.data(), wq.data(), y16.data(), lse.data(), s);
  std::vector<float> dd(static_cast<size_t>(rows));
  auto got_dqkv = unwritten<T>(static_cast<size_t>(3 * BTC));
  emu::launch(dim3(static_cast<unsigned>((rows + 7) / 8)), dim3(32, 8), 0, [&] {
    rows_dot<T>(dd.data(), dout.data(), got_y.data(), rows, s.T, s.H, s.C, HS);
  });
  emu::launch(grid, dim3(kBlockThreads), backward_smem<T, HS>(), [&] {
    fused_backward_kv<T, HS>(got_dqkv.data(), dout.data(), qkv.data(), got_lse.data(), dd.data(), s.T, s.H, s.C,
                             s.score_scale(), s.causal, vector);
  });
  emu::launch(grid, dim3(kBlockThreads), backward_smem<T, HS>(), [&] {
    fused_backward_q<T, HS>(got_dqkv.data(), dout.data(), qkv.data(), got_lse.data(), dd.data(), s.T, s.H, s.C,
                            s.score_scale(), s.causal, vector);
  });
  CHECK(rel_error(widened(got_dqkv), dqkv) < tol);
}

template <typename T>
void check_all(const char* type) {
  CAPTURE(type);
  // heads of 64: one tile and a partial one; three tiles and a partial one. Heads of 32: two samples.
  for (const bool causal : {true, false})
    for (const bool vector : {true, false}) {
      CAPTURE(causal);
      CAPTURE(vector);
      AttentionShape a{1, 70, 128, 2}, b{1, 200, 64, 1}, c{2, 33, 64, 2};
      a.causal = b.causal = c.causal = causal;
      check_shape<T, 64>(a, vector);
      check_shape<T, 64>(b, vector);
      check_shape<T, 32>(c, vector);
    }
}

TEST_CASE("the fused attention's CUDA kernels, emulated on the CPU, give the CPU reference's output, lse and gradients") {
  check_all<emu::bfloat16>("bfloat16");
  check_all<emu::float16>("float16");
}

}  // namespace test_attention_fused_emulated
