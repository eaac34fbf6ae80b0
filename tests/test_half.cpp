// bfloat16 and float16 rounding (kernels/half.hpp): round-to-nearest-even at every boundary,
// subnormals, overflow, infinities and NaN; every float16 and bfloat16 value round-trips. The
// comparison with PyTorch on a million values is tests/torch/half_check.py, which runs this
// file's last case with its vectors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "kernels/half.hpp"
#include "kernels/ops/convert.hpp"

namespace test_half {  // one namespace a file: unity builds compile several files as one

using namespace dp;

TEST_CASE("bfloat16: round to nearest even, NaN canonical, overflow to inf") {
  CHECK(float_to_bf16(1.0f) == 0x3F80);
  CHECK(float_to_bf16(-2.0f) == 0xC000);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  CHECK(float_to_bf16(bits_float(0x3F808000)) == 0x3F80);
  CHECK(float_to_bf16(bits_float(0x3F818000)) == 0x3F82);  // halfway above an odd mantissa: up
  CHECK(float_to_bf16(bits_float(0x3F808001)) == 0x3F81);  // just above halfway: up
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds past the largest: inf
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(float_to_bf16(std::nanf("")) == 0x7FC0);
  CHECK(float_to_bf16(-std::nanf("")) == 0x7FC0);
  CHECK(float_to_bf16(bits_float(0x00000001)) == 0x0000);  // the smallest subnormal rounds to zero
  CHECK(float_to_bf16(bits_float(0x00018000)) == 0x0002);  // subnormal tie to even
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) continue;  // NaNs: canonical, not round-trips
    CHECK(float_to_bf16(bf16_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("float16: round to nearest even, subnormals, overflow, NaN") {
  CHECK(float_to_f16(1.0f) == 0x3C00);
  CHECK(float_to_f16(-2.0f) == 0xC000);
  CHECK(float_to_f16(65504.0f) == 0x7BFF);
  CHECK(float_to_f16(65519.99f) == 0x7BFF);
  CHECK(float_to_f16(65520.0f) == 0x7C00);  // halfway to the next binade: ties to even, inf
  CHECK(float_to_f16(1e10f) == 0x7C00);
  CHECK(float_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
  CHECK(float_to_f16(std::nanf("")) == 0x7E00);
  CHECK(float_to_f16(-std::nanf("")) == 0xFE00);
  CHECK(float_to_f16(0x1.0p-14f) == 0x0400);  // the smallest normal
  CHECK(float_to_f16(0x1.0p-24f) == 0x0001);  // the smallest subnormal
  CHECK(float_to_f16(0x1.0p-25f) == 0x0000);  // halfway to it: ties to even, zero
  CHECK(float_to_f16(0x1.8p-25f) == 0x0001);  // above halfway: up
  CHECK(float_to_f16(0x1.8p-24f) == 0x0002);  // 1.5 units: ties to even, 2
  CHECK(float_to_f16(0x1.ffcp-15f) == 0x0400);  // the largest subnormal's next half-step: carries to normal
  CHECK(float_to_f16(-0.0f) == 0x8000);
  CHECK(float_to_f16(1.0f + 0x1.0p-11f) == 0x3C00);  // tie at 1 + half an ulp: even
  CHECK(float_to_f16(1.0f + 0x1.8p-10f) == 0x3C02);  // tie above an odd mantissa: up
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaNs
    CHECK(float_to_f16(f16_to_float(static_cast<uint16_t>(h))) == h);
    if ((h & 0x7C00) != 0x7C00) CHECK(std::isfinite(f16_to_float(static_cast<uint16_t>(h))));
  }
  CHECK(std::isnan(f16_to_float(0x7E00)));
}

TEST_CASE("16-bit conversions match PyTorch on its own vectors (DP_HALF_VECTORS, tests/torch/half_check.py)") {
  const char* path = std::getenv("DP_HALF_VECTORS");
  if (!path) {
    MESSAGE("DP_HALF_VECTORS not set: run tests/torch/half_check.py for the PyTorch comparison");
    return;
  }
  // Records of (float32 bits, PyTorch's bfloat16 bits, PyTorch's float16 bits), little-endian.
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  uint32_t x = 0;
  uint16_t bf = 0, hf = 0;
  int64_t count = 0, bf_bad = 0, hf_bad = 0;
  while (in.read(reinterpret_cast<char*>(&x), 4) && in.read(reinterpret_cast<char*>(&bf), 2) &&
         in.read(reinterpret_cast<char*>(&hf), 2)) {
    ++count;
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
      // A NaN's bits depend on the path: PyTorch's vectorised CPU cast gives bfloat16 0xFFFF, its
      // scalar one 0x7FC0 (ours), CUDA 0x7FFF. All that is asked is a NaN.
      const auto is_bf_nan = [](uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F); };
      const auto is_hf_nan = [](uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x3FF); };
      if (!is_bf_nan(float_to_bf16(bits_float(x))) || !is_bf_nan(bf)) ++bf_bad;
      if (!is_hf_nan(float_to_f16(bits_float(x))) || !is_hf_nan(hf)) ++hf_bad;
      continue;
    }
    if (float_to_bf16(bits_float(x)) != bf) ++bf_bad;
    if (float_to_f16(bits_float(x)) != hf) ++hf_bad;
  }
  CHECK(count > 100000);
  CHECK(bf_bad == 0);
  CHECK(hf_bad == 0);
}

TEST_CASE("the convert op: float32 to and from bfloat16 and float16 on a host device, other pairs refused") {
  ThreadPool pool(2);
  Exec ex;
  ex.pool = &pool;
  std::vector<float> x{1.0f, -2.5f, 65520.f, 0x1.0p-25f, 3.14159265f, 1e-3f, 0.0f};
  std::vector<uint16_t> b(x.size()), h(x.size());
  std::vector<float> back(x.size());
  convert(ex, {b.data(), DType::BF16}, {x.data(), DType::F32}, static_cast<int64_t>(x.size()));
  convert(ex, {h.data(), DType::F16}, {x.data(), DType::F32}, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(b[i] == float_to_bf16(x[i]));
    CHECK(h[i] == float_to_f16(x[i]));
  }
  convert(ex, {back.data(), DType::F32}, {h.data(), DType::F16}, static_cast<int64_t>(x.size()));
  CHECK(back[0] == 1.0f);
  CHECK(std::isinf(back[2]));
  CHECK(back[4] == f16_to_float(float_to_f16(3.14159265f)));
  convert(ex, {back.data(), DType::F32}, {b.data(), DType::BF16}, static_cast<int64_t>(x.size()));
  CHECK(back[1] == -2.5f);
  std::vector<int32_t> ids(3);
  CHECK_THROWS_AS(convert(ex, {ids.data(), DType::I32}, {x.data(), DType::F32}, 3), RuntimeError);
}

}  // namespace test_half
