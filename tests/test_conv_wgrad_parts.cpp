// The arithmetic of the CUDA direct weight gradient (kernels/conv_wgrad_parts.hpp), checked on the
// host: the plan's parts cover every position once in whole chunks, its tiles cover every tap, the
// kernel's pieces run thread by thread on the host give host_weight_grad's bits, and
// host_weight_grad matches the CPU reference's dw. The GPU test then checks the kernels' bits
// against the same host run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/conv_wgrad_parts.hpp"
#include "kernels/ops/conv2d.hpp"
#include "tests/conv_wgrad_cases.hpp"
#include "tests/helpers.hpp"

namespace test_conv_wgrad_parts {  // one namespace a file: unity builds compile several files as one

using namespace dp;

namespace {

// One thread's registers in the tiled kernel.
template <int M, int N>
struct ThreadState {
  conv_wgrad::LoadColumns<N / 16> columns;
  float dy_regs[M / 16], x_regs[N / 16], acc[M / 16][N / 16];
};

// wgrad_tiles_kernel's blocks, each thread's steps run one thread after another between the
// kernel's barriers: partials[part][tap]. Shared memory starts as NaN, so a word read before it is
// written shows.
template <int M, int N>
std::vector<float> emulate_tiles(const float* dy, const float* x, const conv_wgrad::Geometry& g,
                                 const conv_wgrad::Plan& plan) {
  using namespace conv_wgrad;
  std::vector<float> partials(static_cast<size_t>(plan.parts * g.taps()), NAN);
  std::vector<ThreadState<M, N>> th(kThreads);
  for (int64_t part = 0; part < plan.parts; ++part)
    for (int64_t tile = 0; tile < plan.tiles(); ++tile) {
      std::vector<float> dys(kChunk * (M + kPad), NAN), xs(kChunk * (N + kPad), NAN);
      const int k0 = static_cast<int>(tile / plan.tiles_n) * M, j0 = static_cast<int>(tile % plan.tiles_n) * N;
      const int begin = static_cast<int>(plan.part_begin(part)), end = static_cast<int>(plan.part_begin(part + 1));
      for (int tid = 0; tid < kThreads; ++tid) {
        auto& t = th[static_cast<size_t>(tid)];
        t.columns = load_columns<N / 16>(g, j0, tid);
        for (auto& row : t.acc) std::fill(std::begin(row), std::end(row), 0.f);
        load_stage(t.dy_regs, t.x_regs, dy, x, g, t.columns, k0, begin, tid);
      }
      for (int q0 = begin; q0 < end; q0 += kChunk) {
        for (int tid = 0; tid < kThreads; ++tid)
          store_stage<M, N>(dys.data(), xs.data(), th[static_cast<size_t>(tid)].dy_regs,
                            th[static_cast<size_t>(tid)].x_regs, tid);
        for (int tid = 0; tid < kThreads; ++tid) {
          auto& t = th[static_cast<size_t>(tid)];
          if (q0 + kChunk < end) load_stage(t.dy_regs, t.x_regs, dy, x, g, t.columns, k0, q0 + kChunk, tid);
          multiply_stage<M, N>(t.acc, dys.data(), xs.data(), cell_of(tid));
        }
      }
      for (int tid = 0; tid < kThreads; ++tid)
        write_partials<M, N>(partials.data() + part * g.taps(), th[static_cast<size_t>(tid)].acc, g, k0, j0,
                             cell_of(tid));
    }
  return partials;
}

template <int M>
std::vector<float> emulate_tiles_m(const float* dy, const float* x, const conv_wgrad::Geometry& g,
                                   const conv_wgrad::Plan& plan) {
  return plan.tile.n == 32 ? emulate_tiles<M, 32>(dy, x, g, plan) : emulate_tiles<M, 64>(dy, x, g, plan);
}

// The kernels' dw, run on the host.
std::vector<float> emulate_weight_grad(const float* dy, const float* x, const ConvShape& s) {
  const auto g = conv_wgrad::geometry_of(s);
  const auto plan = conv_wgrad::plan_for(g);
  const auto partials = plan.tile.m == 16   ? emulate_tiles_m<16>(dy, x, g, plan)
                        : plan.tile.m == 32 ? emulate_tiles_m<32>(dy, x, g, plan)
                                            : emulate_tiles_m<64>(dy, x, g, plan);
  std::vector<float> dw(static_cast<size_t>(g.taps()));
  for (int64_t t = 0; t < g.taps(); ++t) dw[static_cast<size_t>(t)] = conv_wgrad::tap_total(partials.data(), g.taps(), plan.parts, t);
  return dw;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float u, float v) {
           return u == v || (std::isnan(u) && std::isnan(v));
         });
}

}  // namespace

TEST_CASE("the direct weight gradient's plan covers every position once in whole chunks and every tap with its tiles") {
  struct Want {
    ConvShape s;
    int m, n;
  };
  for (const Want& want : {Want{{1024, 1, 28, 28, 16, 5, 5, 1, 2}, 16, 32}, Want{{256, 16, 14, 14, 32, 5, 5, 1, 2}, 32, 64},
                           Want{{256, 3, 32, 32, 64, 3, 3, 1, 1}, 64, 32}, Want{{1, 2, 5, 5, 3, 3, 3, 1, 1}, 16, 32},
                           Want{{7, 40, 9, 9, 100, 1, 1, 2, 0}, 64, 64}, Want{{3, 1, 1, 1, 3, 1, 1, 1, 0}, 16, 32}}) {
    const auto g = conv_wgrad::geometry_of(want.s);
    const auto plan = conv_wgrad::plan_for(g);
    CAPTURE(g.N);
    CAPTURE(g.K);
    CHECK(plan.tile.m == want.m);
    CHECK(plan.tile.n == want.n);
    CHECK(plan.tiles_m * plan.tile.m >= g.K);
    CHECK((plan.tiles_m - 1) * plan.tile.m < g.K);
    CHECK(plan.tiles_n * plan.tile.n >= g.cols());
    CHECK((plan.tiles_n - 1) * plan.tile.n < g.cols());
    // Parts: whole chunks, none empty, in order, the last ending at the last chunk's end
    CHECK(plan.parts >= 1);
    CHECK(plan.part_begin(0) == 0);
    CHECK(plan.part_begin(plan.parts) == conv_wgrad::ceil_div(g.positions(), conv_wgrad::kChunk) * conv_wgrad::kChunk);
    for (int64_t p = 0; p < plan.parts; ++p) {
      CHECK(plan.part_begin(p) % conv_wgrad::kChunk == 0);
      CHECK(plan.part_begin(p + 1) > plan.part_begin(p));
    }
    // Enough blocks for a GPU, unless the positions are few; parts of at least about half
    // kMinPositionsPerPart, unless there is only one
    const int64_t blocks = plan.parts * plan.tiles();
    CHECK((blocks >= conv_wgrad::kTargetBlocks / 2 || plan.parts * conv_wgrad::kMinPositionsPerPart >= g.positions()));
    CHECK(blocks <= conv_wgrad::kTargetBlocks + plan.tiles());
    CHECK((plan.parts == 1 || 2 * plan.chunks_per_part * conv_wgrad::kChunk >= conv_wgrad::kMinPositionsPerPart));
  }
  // The threads' cells tile the 16 × 16 grid once; a warp holds 4 rows by 8 columns
  std::vector<int> seen(256, 0);
  for (int tid = 0; tid < conv_wgrad::kThreads; ++tid) {
    const auto cell = conv_wgrad::cell_of(tid);
    REQUIRE(cell.row >= 0);
    REQUIRE(cell.row < 16);
    REQUIRE(cell.col >= 0);
    REQUIRE(cell.col < 16);
    ++seen[static_cast<size_t>(cell.row * 16 + cell.col)];
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  CHECK(conv_wgrad::cell_of(31).row - conv_wgrad::cell_of(0).row == 3);
  CHECK(conv_wgrad::cell_of(31).col - conv_wgrad::cell_of(0).col == 7);
  // Which filters are dp's
  CHECK(conv_wgrad::eligible(ConvShape{8, 1, 28, 28, 16, 5, 5, 1, 2}));     // the convnet's first layer
  CHECK(conv_wgrad::eligible(ConvShape{8, 16, 14, 14, 32, 5, 5, 1, 2}));    // its second: 12800 taps
  CHECK(conv_wgrad::eligible(ConvShape{8, 3, 32, 32, 64, 3, 3, 1, 1}));     // resnet18's first
  CHECK(conv_wgrad::eligible(ConvShape{8, 64, 8, 8, 256, 1, 1, 1, 0}));     // 16384 taps: the most
  CHECK(!conv_wgrad::eligible(ConvShape{8, 64, 8, 8, 64, 3, 3, 1, 1}));     // resnet18's next: cuDNN's
  CHECK(!conv_wgrad::eligible(ConvShape{8, 0, 14, 14, 32, 5, 5, 1, 2}));    // no taps
  CHECK(!conv_wgrad::eligible(ConvShape{70000, 1, 200, 200, 4, 3, 3, 1, 1}));  // indices past 2^31
}

TEST_CASE("the direct weight gradient's tiled kernels, run thread by thread on the host, give the plain sums' bits") {
  for (const ConvShape& s : test::wgrad_direct_shapes()) {
    INFO("shape (N C H W K kh kw stride pad pad_w): ", test::describe(s));
    REQUIRE(conv_wgrad::eligible(s));
    const auto c = test::wgrad_case(s, 70);
    std::vector<float> plain(c.dw.size(), NAN);
    conv_wgrad::host_weight_grad(plain.data(), c.dy.data(), c.x.data(), s);
    CHECK(same_bits(emulate_weight_grad(c.dy.data(), c.x.data(), s), plain));
  }
}

TEST_CASE("the direct weight gradient's tiled kernels give the plain sums' bits on random small shapes") {
  // Odd sizes around the tiles' edges (channels 1-70, columns 1-80), strides 1-3, padding up to the
  // filter's size and past it, images down to 1x1: each against host_weight_grad.
  std::mt19937_64 rng(2026);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)); };
  int tried = 0;
  while (tried < 40) {
    const int64_t kh = pick(1, 5), kw = pick(1, 5), stride = pick(1, 3), pad = pick(0, 3), pad_w = pick(0, 3);
    const int64_t H = pick(1, 9), W = pick(1, 9), C = pick(1, 4), K = pick(1, 70), N = pick(1, 5);
    const ConvShape s{N, C, H, W, K, kh, kw, stride, pad, 1, 1, pad_w};
    if (s.OH() < 1 || s.OW() < 1 || !conv_wgrad::eligible(s)) continue;
    ++tried;
    INFO("shape (N C H W K kh kw stride pad pad_w): ", test::describe(s));
    const auto x = test::random_vector(static_cast<size_t>(N * C * H * W), 300 + tried);
    const auto dy = test::random_vector(static_cast<size_t>(N * K * s.OH() * s.OW()), 400 + tried);
    std::vector<float> plain(static_cast<size_t>(K * C * kh * kw), NAN);
    conv_wgrad::host_weight_grad(plain.data(), dy.data(), x.data(), s);
    CHECK(same_bits(emulate_weight_grad(dy.data(), x.data(), s), plain));
  }
}

TEST_CASE("the direct weight gradient, part by part, matches the CPU reference") {
  for (const ConvShape& s : test::wgrad_direct_shapes()) {
    INFO("shape (N C H W K kh kw stride pad pad_w): ", test::describe(s));
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

}  // namespace test_conv_wgrad_parts
