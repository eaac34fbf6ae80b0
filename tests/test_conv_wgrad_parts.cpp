// The arithmetic of the CUDA direct weight gradient (kernels/conv_wgrad_parts.hpp), checked on the
// host: the parts cover every output row once, a row's column range is exactly the columns whose
// input lies inside the image, and the whole computation, part by part and thread by thread,
// matches the CPU reference's dw. The GPU test then checks the kernel's bits against the same
// host run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/conv_wgrad_parts.hpp"
#include "kernels/ops/conv2d.hpp"
#include "tests/conv_wgrad_cases.hpp"
#include "tests/helpers.hpp"

using namespace dp;
using dp::test::random_vector;

namespace {

// The products of tap t along row (n, oh), every column in order, out-of-image columns skipped
// by a test: what add_row must give bit for bit.
float naive_row(float acc, const float* dy, const float* x, const conv_wgrad::Geometry& g, const conv_wgrad::Tap& t,
                int64_t n, int64_t oh) {
  const int64_t ih = oh * g.stride - g.pad + t.r;
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    const int64_t iw = ow * g.stride - g.pad + t.s;
    if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
    acc = std::fmaf(dy[((n * g.K + t.k) * g.OH + oh) * g.OW + ow], x[((n * g.C + t.c) * g.H + ih) * g.W + iw], acc);
  }
  return acc;
}

}  // namespace

TEST_CASE("the direct weight gradient's parts cover every output row once, and its taps, threads and limits hold") {
  for (auto [N, H, kh, stride, pad] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{1, 5, 3, 1, 1},
                                       {1024, 28, 5, 1, 2}, {7, 9, 3, 2, 0}, {8192, 30, 1, 1, 0}, {3, 1, 1, 1, 0}}) {
    const ConvShape s{N, 2, H, H, 3, kh, kh, stride, pad};
    const auto g = conv_wgrad::geometry_of(s);
    CAPTURE(N);
    CAPTURE(H);
    const int64_t P = conv_wgrad::parts_for(g), R = g.rows();
    CHECK(P >= 1);
    CHECK(P <= conv_wgrad::kMaxParts);
    std::vector<int> seen(static_cast<size_t>(R), 0);
    for (int64_t p = 0; p < P; ++p)
      for (int64_t r = conv_wgrad::part_begin(R, p, P); r < conv_wgrad::part_begin(R, p + 1, P); ++r) ++seen[r];
    CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    // A part holds at most kPositionsPerPart positions (or one row, if longer) unless the parts
    // are at their most (8192 samples of 30 rows here)
    CHECK((P == conv_wgrad::kMaxParts || (R + P - 1) / P * g.OW <= std::max(conv_wgrad::kPositionsPerPart, g.OW)));
    CHECK((P == conv_wgrad::kMaxParts) == (N == 8192));
  }
  // Taps in weight order [K, C, kh, kw]
  const auto g = conv_wgrad::geometry_of(ConvShape{1, 3, 8, 8, 4, 2, 5, 1, 0});
  const auto t = conv_wgrad::tap_of(g, ((2 * 3 + 1) * 2 + 1) * 5 + 3);
  CHECK(t.k == 2);
  CHECK(t.c == 1);
  CHECK(t.r == 1);
  CHECK(t.s == 3);
  CHECK(conv_wgrad::taps_per_thread(1) == 1);
  CHECK(conv_wgrad::taps_per_thread(256) == 1);
  CHECK(conv_wgrad::taps_per_thread(257) == 2);
  CHECK(conv_wgrad::taps_per_thread(400) == 2);
  CHECK(conv_wgrad::taps_per_thread(1024) == 4);
  CHECK(conv_wgrad::taps_per_thread(2048) == 8);
  CHECK(conv_wgrad::eligible(ConvShape{8, 1, 28, 28, 16, 5, 5, 1, 2}));   // the convnet's first layer
  CHECK(conv_wgrad::eligible(ConvShape{8, 64, 8, 8, 32, 1, 1, 1, 0}));    // 2048 taps: the most
  CHECK(!conv_wgrad::eligible(ConvShape{8, 16, 14, 14, 32, 5, 5, 1, 2}));  // 12800 taps: cuDNN's
  CHECK(!conv_wgrad::eligible(ConvShape{8, 0, 14, 14, 32, 5, 5, 1, 2}));   // no taps
}

TEST_CASE("a row's columns are exactly those whose input lies in the image, summed in order (bit for bit)") {
  uint64_t seed = 500;
  for (int64_t stride : {1, 2, 3})
    for (int64_t pad : {0, 1, 2, 3})
      for (int64_t k : {1, 2, 3, 5, 7})
        for (int64_t W : {1, 2, 4, 6, 9}) {
          const int64_t H = 5;
          if (W + 2 * pad < k || H + 2 * pad < k) continue;
          const ConvShape s{2, 2, H, W, 2, k, k, stride, pad};
          const auto g = conv_wgrad::geometry_of(s);
          const auto x = random_vector(s.N * s.C * H * W, seed++), dy = random_vector(s.N * s.K * g.OH * g.OW, seed++);
          bool same = true;
          for (int64_t t = 0; t < g.taps(); ++t)
            for (int64_t n = 0; n < s.N; ++n)
              for (int64_t oh = 0; oh < g.OH; ++oh) {
                const auto tap = conv_wgrad::tap_of(g, t);
                const float got = conv_wgrad::add_row(0.25f, dy.data(), x.data(), g, tap, n, oh);
                const float want = naive_row(0.25f, dy.data(), x.data(), g, tap, n, oh);
                same = same && got == want;
              }
          CAPTURE(stride);
          CAPTURE(pad);
          CAPTURE(k);
          CAPTURE(W);
          CHECK(same);
        }
}

TEST_CASE("the direct weight gradient, part by part and thread by thread, matches the CPU reference") {
  for (const ConvShape& s : test::wgrad_direct_shapes()) {
    INFO("shape (N C H W K kh kw stride pad): ", test::describe(s));
    REQUIRE(conv_wgrad::eligible(s));
    const auto c = test::wgrad_case(s, 60);
    std::vector<float> got(c.dw.size(), NAN);
    conv_wgrad::host_weight_grad(got.data(), c.dy.data(), c.x.data(), s);
    double err = 0, scale = 1;
    for (size_t i = 0; i < got.size(); ++i) {
      err = std::max(err, std::abs(double(got[i]) - c.dw[i]));
      scale = std::max(scale, std::abs(double(c.dw[i])));
    }
    CHECK(err / scale < 1e-5);
  }
}
