// The weight gradient of a convolution with few filter taps (K·C·kh·kw ≤ kMaxTaps), computed on
// a GPU by dp's own kernels (kernels/cuda/conv_wgrad_direct.cu) instead of cuDNN's deterministic
// algorithms, whose choices for these shapes on an H100 ran on the filter's parallelism, not the
// batch's: 0.58 ms a step for the convnet's second convolution (16→32, 5×5) at batch 1024, and
// 1.26 ms at batch 256 — paid by every replica of `cuda:0x4` (RESULTS.md, the H100 runs of 2026-11-26).
//
// dw[k][j] = Σ_q dy[k][q] · x̂[j][q]: k an output channel, j = (c, r, s) a column of the filter,
// q = (n, oh, ow) an output position, x̂ the input under tap j at position q (0 in the padding).
// The positions are cut into parts of whole chunks (kChunk positions; how many parts depends on
// the shape only, never on the GPU), and a block computes a tile of taps (TileShape) over one
// part: each stage it stages a chunk of dy and of x̂ in shared memory, and each thread adds its
// taps' products in position order, in float with fused multiply-adds. A second kernel adds each
// tap's parts in a fixed order (tap_total), in double, and rounds once: the same bits every run
// and on every GPU.
//
// Host code too. host_weight_grad is the arithmetic in its plainest form (per tap, per part,
// positions in order) — the CPU test checks it against the CPU reference and the GPU test checks
// the kernels' bits against it. The kernels' pieces (load_stage, store_stage, multiply_stage,
// write_partials) are host-callable, so the CPU test also runs a block's threads one by one on
// the host and checks the tiling gives host_weight_grad's bits.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/ops/conv2d.hpp"  // ConvShape
#include "kernels/scalar_arg.hpp"   // DP_HOST_DEVICE

// On the GPU the per-thread arrays stay in registers only if the loops over them are unrolled.
#ifdef __CUDA_ARCH__
#define DP_CONV_WGRAD_UNROLL _Pragma("unroll")
#else
#define DP_CONV_WGRAD_UNROLL
#endif

namespace dp::conv_wgrad {

constexpr int kThreads = 256;  // a block: 16 × 16 threads (kernels/cuda/launch.cuh's kThreads; the .cu checks)
constexpr int kChunk = 16;     // positions a stage: one per thread row of the loads
constexpr int kPad = 4;        // floats after each staged row: fewer bank conflicts, 16-byte rows kept
constexpr int64_t kMaxTaps = 16384;  // the convnet's two layers, resnet18's first; larger ones stay cuDNN's
constexpr int64_t kMinPositionsPerPart = 256;  // 16 stages a block at least
constexpr int64_t kTargetBlocks = 1024;        // parts × tiles aimed at: several waves on any GPU

// A convolution's sizes with its output's, in the form the kernels take by value. eligible()
// keeps every index of the kernels below 2^31, so they compute in int.
struct Geometry {
  int64_t N, C, H, W, K, kh, kw, stride, pad, OH, OW;
  int64_t pad_w;  // the width's padding (pad is the height's)
  DP_HOST_DEVICE int64_t cols() const { return C * kh * kw; }
  DP_HOST_DEVICE int64_t taps() const { return K * cols(); }
  DP_HOST_DEVICE int64_t positions() const { return N * OH * OW; }
};

inline Geometry geometry_of(const ConvShape& s) {
  return {s.N, s.C, s.H, s.W, s.K, s.kh, s.kw, s.stride, s.ph(), s.OH(), s.OW(), s.pw()};
}

inline bool eligible(const ConvShape& s) {
  const Geometry g = geometry_of(s);
  constexpr int64_t kIntLimit = std::numeric_limits<int32_t>::max() - kChunk;
  return s.groups == 1 && s.dilation == 1 && g.taps() >= 1 && g.taps() <= kMaxTaps && g.stride >= 1 && g.OH >= 0 &&
         g.OW >= 0 &&
         g.N * g.C * g.H * g.W <= kIntLimit && g.N * g.K * g.OH * g.OW <= kIntLimit;
}

// A block's taps: m output channels by n filter columns, each thread m/16 by n/16 of them.
struct TileShape {
  int m, n;
};

inline TileShape tile_for(const Geometry& g) {
  return {g.K <= 16 ? 16 : g.K <= 32 ? 32 : 64, g.cols() <= 32 ? 32 : 64};
}

// How the work is cut: tiles of taps, and parts of the positions (whole chunks each; the last
// part ends at the last chunk's end, past the last position, where dy and x̂ read as 0).
struct Plan {
  TileShape tile;
  int64_t tiles_m, tiles_n, parts, chunks_per_part, chunks;
  DP_HOST_DEVICE int64_t part_begin(int64_t p) const {
    return (p * chunks_per_part < chunks ? p * chunks_per_part : chunks) * kChunk;
  }
  DP_HOST_DEVICE int64_t tiles() const { return tiles_m * tiles_n; }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline Plan plan_for(const Geometry& g) {
  Plan p{};
  p.tile = tile_for(g);
  p.tiles_m = ceil_div(g.K, p.tile.m);
  p.tiles_n = ceil_div(g.cols(), p.tile.n);
  p.chunks = ceil_div(g.positions(), kChunk);
  const int64_t wanted = std::clamp<int64_t>(ceil_div(kTargetBlocks, p.tiles()), 1,
                                             std::max<int64_t>(1, ceil_div(g.positions(), kMinPositionsPerPart)));
  p.chunks_per_part = std::max<int64_t>(1, ceil_div(p.chunks, wanted));
  p.parts = std::max<int64_t>(1, ceil_div(p.chunks, p.chunks_per_part));
  return p;
}

// Thread tid's cell in the 16 × 16 grid of a tile's threads: its taps are rows row·(m/16) + a and
// columns col·(n/16) + b. A warp covers 4 rows by 8 columns, so a stage's shared reads touch few
// distinct words.
struct Cell {
  int row, col;
};
DP_HOST_DEVICE inline Cell cell_of(int tid) {
  const int warp = tid / 32, lane = tid % 32;
  return {(warp / 2) * 4 + lane / 8, (warp % 2) * 8 + lane % 8};
}

// The filter columns thread tid loads each stage: j0 + tid/16 + 16·i, as (channel offset, r, s).
template <int RN>
struct LoadColumns {
  int x_offset[RN], r[RN], s[RN];
  bool live[RN];
};

template <int RN>
DP_HOST_DEVICE inline LoadColumns<RN> load_columns(const Geometry& g, int j0, int tid) {
  LoadColumns<RN> lc;
  const int kh = static_cast<int>(g.kh), kw = static_cast<int>(g.kw);
  DP_CONV_WGRAD_UNROLL
  for (int i = 0; i < RN; ++i) {
    const int j = j0 + tid / 16 + 16 * i;
    lc.live[i] = j < g.cols();
    const int c = j / (kh * kw), rs = j - c * (kh * kw);
    lc.r[i] = rs / kw;
    lc.s[i] = rs - lc.r[i] * kw;
    lc.x_offset[i] = lc.live[i] ? c * static_cast<int>(g.H * g.W) : 0;
  }
  return lc;
}

// Thread tid's loads for the chunk at q0: position q0 + tid%16 of dy's rows k0 + tid/16 + 16·i
// and of x̂'s columns (lc), 0 past the last position, past the last tap and in the padding.
template <int RM, int RN>
DP_HOST_DEVICE inline void load_stage(float (&dy_regs)[RM], float (&x_regs)[RN], const float* dy, const float* x,
                                      const Geometry& g, const LoadColumns<RN>& lc, int k0, int q0, int tid) {
  const int q = q0 + tid % 16, plane = static_cast<int>(g.OH * g.OW);
  const bool live = q < g.positions();  // false for every q when there are no positions
  const int n = live ? q / plane : 0, at = live ? q - n * plane : 0;
  const int oh = live ? at / static_cast<int>(g.OW) : 0, ow = at - oh * static_cast<int>(g.OW);
  const int K = static_cast<int>(g.K), H = static_cast<int>(g.H), W = static_cast<int>(g.W);
  DP_CONV_WGRAD_UNROLL
  for (int i = 0; i < RM; ++i) {
    const int k = k0 + tid / 16 + 16 * i;
    dy_regs[i] = live && k < K ? dy[(n * K + k) * plane + at] : 0.f;
  }
  const int ih0 = oh * static_cast<int>(g.stride) - static_cast<int>(g.pad);
  const int iw0 = ow * static_cast<int>(g.stride) - static_cast<int>(g.pad_w);
  const int sample = n * static_cast<int>(g.C) * H * W;
  DP_CONV_WGRAD_UNROLL
  for (int i = 0; i < RN; ++i) {
    const int ih = ih0 + lc.r[i], iw = iw0 + lc.s[i];
    const bool inside = live && lc.live[i] && ih >= 0 && ih < H && iw >= 0 && iw < W;
    x_regs[i] = inside ? x[sample + lc.x_offset[i] + ih * W + iw] : 0.f;
  }
}

// The loads into shared memory, position-major: dys[qq][row] (M + kPad a row), xs[qq][col].
template <int M, int N>
DP_HOST_DEVICE inline void store_stage(float* dys, float* xs, const float (&dy_regs)[M / 16],
                                       const float (&x_regs)[N / 16], int tid) {
  const int qq = tid % 16, lane_row = tid / 16;
  DP_CONV_WGRAD_UNROLL
  for (int i = 0; i < M / 16; ++i) dys[qq * (M + kPad) + lane_row + 16 * i] = dy_regs[i];
  DP_CONV_WGRAD_UNROLL
  for (int i = 0; i < N / 16; ++i) xs[qq * (N + kPad) + lane_row + 16 * i] = x_regs[i];
}

// A thread's taps' products over the staged chunk, positions in order.
template <int M, int N>
DP_HOST_DEVICE inline void multiply_stage(float (&acc)[M / 16][N / 16], const float* dys, const float* xs, Cell cell) {
  constexpr int RM = M / 16, RN = N / 16;
  DP_CONV_WGRAD_UNROLL
  for (int qq = 0; qq < kChunk; ++qq) {
    float a[RM], b[RN];
    DP_CONV_WGRAD_UNROLL
    for (int i = 0; i < RM; ++i) a[i] = dys[qq * (M + kPad) + cell.row * RM + i];
    DP_CONV_WGRAD_UNROLL
    for (int j = 0; j < RN; ++j) b[j] = xs[qq * (N + kPad) + cell.col * RN + j];
    DP_CONV_WGRAD_UNROLL
    for (int i = 0; i < RM; ++i) {
      DP_CONV_WGRAD_UNROLL
      for (int j = 0; j < RN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  }
}

// A thread's sums into its part's row of partials[part][tap] (tap = k·cols + j).
template <int M, int N>
DP_HOST_DEVICE inline void write_partials(float* part_row, const float (&acc)[M / 16][N / 16], const Geometry& g,
                                          int k0, int j0, Cell cell) {
  constexpr int RM = M / 16, RN = N / 16;
  const int K = static_cast<int>(g.K), J = static_cast<int>(g.cols());
  DP_CONV_WGRAD_UNROLL
  for (int i = 0; i < RM; ++i) {
    const int k = k0 + cell.row * RM + i;
    DP_CONV_WGRAD_UNROLL
    for (int j = 0; j < RN; ++j) {
      const int col = j0 + cell.col * RN + j;
      if (k < K && col < J) part_row[k * J + col] = acc[i][j];
    }
  }
}

// Tap t's gradient from its P parts' sums (partials[part][tap]), in double, rounded once:
// kFinishLanes lanes each add the parts p ≡ lane (mod kFinishLanes) in order, then the lanes' sums
// are added pairwise, lane + kFinishLanes/2 into lane first. The finishing kernel runs the lanes as
// threads (a block: 32 taps by kFinishLanes lanes, so each load is 32 consecutive taps): many
// loads in flight where one thread a tap walked up to a thousand parts one by one.
constexpr int kFinishLanes = 8;

DP_HOST_DEVICE inline double lane_sum(const float* partials, int64_t taps, int64_t P, int64_t t, int lane) {
  double total = 0;
  for (int64_t p = lane; p < P; p += kFinishLanes) total += partials[p * taps + t];
  return total;
}

// The lanes' sums added as the kernel adds them: sums[lane] += sums[lane + half], halving.
DP_HOST_DEVICE inline void add_lanes_step(double* sums, int half, int lane) {
  if (lane < half) sums[lane] += sums[lane + half];
}

inline float tap_total(const float* partials, int64_t taps, int64_t P, int64_t t) {
  double sums[kFinishLanes];
  for (int lane = 0; lane < kFinishLanes; ++lane) sums[lane] = lane_sum(partials, taps, P, t, lane);
  for (int half = kFinishLanes / 2; half > 0; half /= 2)
    for (int lane = 0; lane < half; ++lane) add_lanes_step(sums, half, lane);
  return static_cast<float>(sums[0]);
}

// The kernels' arithmetic, plainly: each tap's sum over each part's positions in order (0 past
// the last position, as the kernels stage it), then its parts added by tap_total. dw[K·C·kh·kw].
inline void host_weight_grad(float* dw, const float* dy, const float* x, const ConvShape& s) {
  const Geometry g = geometry_of(s);
  const Plan plan = plan_for(g);
  const int64_t T = g.taps(), J = g.cols(), Q = g.positions(), plane = g.OH * g.OW;
  std::vector<float> partials(static_cast<size_t>(plan.parts * T));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t k = t / J, j = t % J, c = j / (g.kh * g.kw), r = j / g.kw % g.kh, sc = j % g.kw;
    for (int64_t p = 0; p < plan.parts; ++p) {
      float acc = 0.f;
      for (int64_t q = plan.part_begin(p); q < plan.part_begin(p + 1); ++q) {
        float d = 0.f, v = 0.f;
        if (q < Q) {
          const int64_t n = q / plane, at = q % plane, oh = at / g.OW, ow = at % g.OW;
          const int64_t ih = oh * g.stride - g.pad + r, iw = ow * g.stride - g.pad_w + sc;
          d = dy[(n * g.K + k) * plane + at];
          if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) v = x[((n * g.C + c) * g.H + ih) * g.W + iw];
        }
        acc = std::fmaf(d, v, acc);
      }
      partials[static_cast<size_t>(p * T + t)] = acc;
    }
  }
  for (int64_t t = 0; t < T; ++t) dw[t] = tap_total(partials.data(), T, plan.parts, t);
}

}  // namespace dp::conv_wgrad
