// AdamW's CUDA kernel (kernels/cuda/adamw_kernels.cuh) run on the CPU through warp_emulation.hpp,
// in a grid smaller than the array (the grid-stride loop), against the CPU reference over decay
// spans; with mixed precision's 16-bit copy written in its pass: the copy is the updated
// parameters rounded (bfloat16, float16), and a skipped step's copy the unchanged parameters'.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/ops/adamw.hpp"
#include "emulated_values.hpp"
#include "warp_emulation.hpp"
#include "kernels/cuda/adamw_kernels.cuh"

namespace test_adamw_emulated {

using namespace dp;
using namespace dp::cuda::adamw_kernels;
using namespace dp::emulated;

template <typename Low>
void check(bool skipped) {
  CAPTURE(skipped);
  const int64_t n = 1001;
  DecaySpans spans;
  spans.count = 3;
  spans.end[0] = 3, spans.end[1] = 5, spans.end[2] = n;
  spans.decay[0] = true, spans.decay[1] = false, spans.decay[2] = true;
  const AdamWStep s{1e-2f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.05f};
  const auto p0 = random_values(n, 41, -1.f, 1.f), g = random_values(n, 42, -1.f, 1.f),
             m0 = random_values(n, 43, -0.1f, 0.1f), v0 = random_values(n, 44, 0.f, 0.1f);
  auto p = p0, m = m0, v = v0;
  std::vector<Low> low = unwritten<Low>(static_cast<size_t>(n));
  const int32_t skip = skipped ? 1 : 0;
  emu::launch(dim3(3), dim3(64), 0, [&] {
    adamw_kernel<Low>(p.data(), g.data(), m.data(), v.data(), s, n, &skip, spans, low.data());
  });
  // the reference: the host op, a span at a time
  ThreadPool pool(1);
  const Exec host{&pool, nullptr, nullptr};
  auto rp = p0, rm = m0, rv = v0;
  const auto f32 = [](std::vector<float>& x) { return Buf{x.data(), DType::F32}; };
  adamw_update(host, f32(rp), Buf{const_cast<float*>(g.data()), DType::F32}, f32(rm), f32(rv), s, spans,
               Buf{const_cast<int32_t*>(&skip), DType::I32});
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    const size_t k = static_cast<size_t>(i);
    CHECK(std::abs(p[k] - rp[k]) <= 1e-6f * std::max(1.f, std::abs(rp[k])));
    CHECK(std::abs(m[k] - rm[k]) <= 1e-6f * std::max(1e-3f, std::abs(rm[k])));
    CHECK(std::abs(v[k] - rv[k]) <= 1e-6f * std::max(1e-3f, std::abs(rv[k])));
    CHECK(low[k].bits == cuda::store_as<Low>(p[k]).bits);  // the copy of what the kernel wrote
    if (skipped) CHECK(p[k] == p0[k]);
    if (!skipped && (i == 3 || i == 4)) CHECK(p[k] != p0[k]);
  }
}

TEST_CASE("AdamW's kernel writes the CPU reference's update and mixed precision's 16-bit copy of it, skipped or not") {
  for (bool skipped : {false, true}) {
    check<emu::bfloat16>(skipped);
    check<emu::float16>(skipped);
  }
}

}  // namespace test_adamw_emulated
