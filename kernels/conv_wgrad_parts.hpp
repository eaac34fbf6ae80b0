// The weight gradient of a convolution with few filter taps (K·C·kh·kw ≤ kMaxTaps), computed
// directly on a GPU (kernels/cuda/conv_wgrad_direct.cu) instead of by cuDNN's deterministic
// algorithm, whose parallelism is the filter's, not the batch's: on an H100 it took 0.58 ms a step
// for the convnet's first convolution (1→16, 5×5) at batch 1024, a quarter of the step, and going
// by what --cudnn deterministic costs over heuristic, about as much at batch 128 — paid again by
// every replica of `cuda:0xN`.
//
// The batch's output rows (n, oh) are cut into parts, one block each (how many depends on the
// shape only, never on the GPU). Thread t of a block sums taps t, t + kThreads, … over its part's
// rows in order and each row's columns in order, in float with fused multiply-adds; a second kernel
// adds each tap's parts in order, in double, and rounds once: the same bits every run and on every
// GPU. Host code too: host_weight_grad runs the same parts, so the CPU tests check the arithmetic
// against the CPU reference and the GPU test checks the kernel's bits against it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops/conv2d.hpp"  // ConvShape
#include "kernels/scalar_arg.hpp"   // DP_HOST_DEVICE

// On the GPU a thread's accumulators stay in registers only if the loops over them are unrolled.
#ifdef __CUDA_ARCH__
#define DP_CONV_WGRAD_UNROLL _Pragma("unroll")
#else
#define DP_CONV_WGRAD_UNROLL
#endif

namespace dp::conv_wgrad {

constexpr int kThreads = 256;  // a block (kernels/cuda/launch.cuh's kThreads; the .cu checks)
constexpr int kMaxTapsPerThread = 8;
constexpr int64_t kMaxTaps = int64_t{kThreads} * kMaxTapsPerThread;
constexpr int64_t kPositionsPerPart = 1024;  // a block's walk per tap: many blocks at small batches
constexpr int64_t kMaxParts = 4096;

// A convolution's sizes with its output's, in the form the kernels take by value.
struct Geometry {
  int64_t N, C, H, W, K, kh, kw, stride, pad, OH, OW;
  DP_HOST_DEVICE int64_t taps() const { return K * C * kh * kw; }
  DP_HOST_DEVICE int64_t rows() const { return N * OH; }
};

inline Geometry geometry_of(const ConvShape& s) {
  return {s.N, s.C, s.H, s.W, s.K, s.kh, s.kw, s.stride, s.pad, s.OH(), s.OW()};
}

// Small enough for a block to hold every tap: 1 to kMaxTaps of them.
inline bool eligible(const ConvShape& s) {
  const Geometry g = geometry_of(s);
  return g.taps() >= 1 && g.taps() <= kMaxTaps && g.stride >= 1 && g.OH >= 0 && g.OW >= 0;
}

// Parts of the N·OH output rows: about kPositionsPerPart output positions each, at most kMaxParts.
inline int64_t parts_for(const Geometry& g) {
  const int64_t rows_per_part = std::max<int64_t>(1, kPositionsPerPart / std::max<int64_t>(1, g.OW));
  return std::clamp<int64_t>((g.rows() + rows_per_part - 1) / rows_per_part, 1, kMaxParts);
}

// Part p of P covers rows [part_begin(R, p, P), part_begin(R, p + 1, P)).
DP_HOST_DEVICE inline int64_t part_begin(int64_t rows, int64_t p, int64_t P) { return rows * p / P; }

// Threads' taps: 1, 2, 4 or 8 each (the kernel's template argument).
inline int taps_per_thread(int64_t taps) {
  int per = 1;
  while (per < kMaxTapsPerThread && int64_t{per} * kThreads < taps) per *= 2;
  return per;
}

// Tap t of the [K, C, kh, kw] weight.
struct Tap {
  int64_t k, c, r, s;
};
DP_HOST_DEVICE inline Tap tap_of(const Geometry& g, int64_t t) {
  Tap tap;
  tap.s = t % g.kw;
  t /= g.kw;
  tap.r = t % g.kh;
  t /= g.kh;
  tap.c = t % g.C;
  tap.k = t / g.C;
  return tap;
}

// acc plus tap's products along output row (n, oh), columns in order. Only the columns whose input
// column lies inside the image are visited (the padding contributes nothing), so the inner loop
// has no bounds test.
DP_HOST_DEVICE inline float add_row(float acc, const float* dy, const float* x, const Geometry& g, const Tap& t,
                                    int64_t n, int64_t oh) {
  const int64_t ih = oh * g.stride - g.pad + t.r;
  if (ih < 0 || ih >= g.H) return acc;
  // Input column iw = ow·stride − pad + s must lie in [0, W).
  const int64_t before = g.pad - t.s, last = g.W - 1 + g.pad - t.s;
  if (last < 0) return acc;
  const int64_t lo = before > 0 ? (before + g.stride - 1) / g.stride : 0;
  const int64_t hi = last / g.stride + 1 < g.OW ? last / g.stride + 1 : g.OW;
  const int64_t dy_row = ((n * g.K + t.k) * g.OH + oh) * g.OW;
  const int64_t x_row = ((n * g.C + t.c) * g.H + ih) * g.W - g.pad + t.s;  // + ow·stride: in the row
  for (int64_t ow = lo; ow < hi; ++ow) acc = fmaf(dy[dy_row + ow], x[x_row + ow * g.stride], acc);
  return acc;
}

// One thread's sums over rows [begin, end): its taps thread, thread + kThreads, … (P of them;
// live[j] false past the last tap), each in its own accumulator, row after row.
template <int P>
DP_HOST_DEVICE inline void part_sums(float (&acc)[P], const float* dy, const float* x, const Geometry& g, int64_t thread,
                                     int64_t begin, int64_t end) {
  Tap taps[P];
  bool live[P];
  DP_CONV_WGRAD_UNROLL
  for (int j = 0; j < P; ++j) {
    const int64_t t = thread + int64_t{j} * kThreads;
    live[j] = t < g.taps();
    if (live[j]) taps[j] = tap_of(g, t);
    acc[j] = 0.f;
  }
  if (begin >= end) return;
  int64_t n = begin / g.OH, oh = begin - n * g.OH;
  for (int64_t row = begin; row < end; ++row) {
    DP_CONV_WGRAD_UNROLL
    for (int j = 0; j < P; ++j)
      if (live[j]) acc[j] = add_row(acc[j], dy, x, g, taps[j], n, oh);
    if (++oh == g.OH) oh = 0, ++n;
  }
}

// Tap t's gradient: its P parts' sums (partials[part][tap]) added in order, in double, rounded once.
DP_HOST_DEVICE inline float tap_total(const float* partials, int64_t taps, int64_t P, int64_t t) {
  double total = 0;
  for (int64_t p = 0; p < P; ++p) total += partials[p * taps + t];
  return static_cast<float>(total);
}

// The kernels' computation on the host, part by part and thread by thread: dw[K·C·kh·kw].
inline void host_weight_grad(float* dw, const float* dy, const float* x, const ConvShape& s) {
  const Geometry g = geometry_of(s);
  const int64_t T = g.taps(), P = parts_for(g), R = g.rows();
  std::vector<float> partials(static_cast<size_t>(P * T));
  for (int64_t p = 0; p < P; ++p)
    for (int64_t thread = 0; thread < kThreads && thread < T; ++thread) {
      float acc[kMaxTapsPerThread];
      part_sums(acc, dy, x, g, thread, part_begin(R, p, P), part_begin(R, p + 1, P));
      for (int j = 0; j < kMaxTapsPerThread; ++j)
        if (const int64_t t = thread + int64_t{j} * kThreads; t < T) partials[static_cast<size_t>(p * T + t)] = acc[j];
    }
  for (int64_t t = 0; t < T; ++t) dw[t] = tap_total(partials.data(), T, P, t);
}

}  // namespace dp::conv_wgrad
