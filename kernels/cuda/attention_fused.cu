// Fused ("flash") attention on 16-bit operands (FlashAttention-2's schedule): no [B, H, T, T]
// tensor on either pass. q, k and v are read where they lie in qkv [B, T, 3C] and the results
// written into out [B, T, C] and dqkv (no permutes), a block per (head, 64 rows), a warp per 16
// of them, the products on the tensor cores (WMMA 16x16x16, float32 accumulation).
//
// Forward: each warp's 16 query rows meet the keys 64 at a time (causal: only the tiles at or
// before the diagonal); the scores go to shared memory in float32, the online softmax (running
// max and sum) turns them into 16-bit probabilities and rescales the float32 output rows, which
// then add P·V. Written: out, and each row's log-sum-exp (lse) for backward.
// Backward: D = Σ dout·out per row (the softmax's backward needs Σ_j p_j dp_j, which that is);
// then one kernel per key block for dK and dV (every query tile after it, causal) and one per
// query block for dQ (every key tile before it), each recomputing p = exp(scale·s − lse): two
// passes instead of one with atomics, so every sum has a fixed order (the same bits every run).
//
// Two lanes hold a row of a warp's 16 (lane = 2·row + half), each with 32 of its 64 columns:
// the row's max and sum meet with one shuffle. WMMA's fragments are used only through shared
// memory (load, mma, store), never element by element, except uniform scaling.
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_fused.hpp"

namespace dp::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;          // rows a block owns; keys (or queries) a step of its loop takes
constexpr int kWarps = 4;          // 16 of the block's rows each
constexpr int kThreads = 32 * kWarps;
constexpr int kPad16 = 8;          // a 16-bit tile row's padding (16 bytes: rows stay 16-byte aligned)
constexpr int kPad32 = 4;          // a float32 row's
constexpr int kScoreLd = kTile + kPad32;  // a warp's [16][64] scores in float32
constexpr int kProbLd = kTile + kPad16;   // a warp's [16][64] probabilities in 16 bits

// Byte offsets into the dynamic shared memory, each region 128-byte aligned (WMMA wants 32).
__host__ __device__ constexpr size_t align128(size_t n) { return (n + 127) / 128 * 128; }
template <typename T, int HS>
__host__ __device__ constexpr size_t tile_bytes() { return align128(size_t{kTile} * (HS + kPad16) * sizeof(T)); }
__host__ __device__ constexpr size_t warp_scores_bytes() { return align128(size_t{kWarps} * 16 * kScoreLd * sizeof(float)); }
template <typename T>
__host__ __device__ constexpr size_t warp_probs_bytes() { return align128(size_t{kWarps} * 16 * kProbLd * sizeof(T)); }
template <int HS>
__host__ __device__ constexpr size_t warp_out_bytes() { return align128(size_t{kWarps} * 16 * (HS + kPad32) * sizeof(float)); }

template <typename T, int HS>
__host__ __device__ constexpr size_t forward_smem() {  // Q, K, V tiles; scores, probabilities and output rows a warp
  return 3 * tile_bytes<T, HS>() + warp_scores_bytes() + warp_probs_bytes<T>() + warp_out_bytes<HS>();
}
template <typename T, int HS>
__host__ __device__ constexpr size_t backward_smem() {  // four tiles; lse and D of a tile; two float and two 16-bit [16][64] a warp
  return 4 * tile_bytes<T, HS>() + align128(2 * kTile * sizeof(float)) + 2 * warp_scores_bytes() +
         2 * warp_probs_bytes<T>();
}

// The rows [first, first + 64) of one head's [T, HS] slice (row stride ld) into a tile, zeros past
// the sequence's end; 16-byte loads when every row start allows them.
template <typename T, int HS>
__device__ void load_tile(T* tile, const T* src, int64_t ld, int64_t first, int64_t seq, bool vector) {
  constexpr int kLd = HS + kPad16;
  if (vector) {
    constexpr int kPerRow = HS * int(sizeof(T)) / 16;  // uint4s a row
    for (int i = threadIdx.x; i < kTile * kPerRow; i += kThreads) {
      const int r = i / kPerRow, c = i % kPerRow;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (first + r < seq) v = reinterpret_cast<const uint4*>(src + (first + r) * ld)[c];
      reinterpret_cast<uint4*>(tile + r * kLd)[c] = v;
    }
  } else {
    for (int i = threadIdx.x; i < kTile * HS; i += kThreads) {
      const int r = i / HS, c = i % HS;
      tile[r * kLd + c] = first + r < seq ? src[(first + r) * ld + c] : store_as<T>(0.f);
    }
  }
}

template <typename T>
using MatrixA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T, typename Layout>
using MatrixB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// out [16][64] (float, ld kScoreLd) = a [16][HS] · bᵀ, b the tile's 64 rows [64][HS] — a warp's rows
// against a tile's (q·kᵀ, dout·vᵀ, k·qᵀ, v·doutᵀ).
template <typename T, int HS>
__device__ void rows_times_tile_t(float* out, const T* a, int lda, const T* tile) {
  constexpr int kLd = HS + kPad16;
  Accumulator acc[kTile / 16];
  for (auto& f : acc) wmma::fill_fragment(f, 0.f);
  for (int kk = 0; kk < HS; kk += 16) {
    MatrixA<T> fa;
    wmma::load_matrix_sync(fa, a + kk, lda);
    for (int n = 0; n < kTile / 16; ++n) {
      MatrixB<T, wmma::col_major> fb;  // element (k, j) = tile[j][k]: the tile transposed
      wmma::load_matrix_sync(fb, tile + n * 16 * kLd + kk, kLd);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
  for (int n = 0; n < kTile / 16; ++n) wmma::store_matrix_sync(out + n * 16, acc[n], kScoreLd, wmma::mem_row_major);
}

// acc[HS/16] += p [16][64] (16-bit, ld kProbLd) · tile [64][HS] (p·v, pᵀ·dout, dsᵀ·q, ds·k).
template <typename T, int HS>
__device__ void add_probs_times_tile(Accumulator (&acc)[HS / 16], const T* p, const T* tile) {
  constexpr int kLd = HS + kPad16;
  for (int kk = 0; kk < kTile; kk += 16) {
    MatrixA<T> fa;
    wmma::load_matrix_sync(fa, p + kk, kProbLd);
    for (int n = 0; n < HS / 16; ++n) {
      MatrixB<T, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, tile + kk * kLd + n * 16, kLd);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// A warp's 16 result rows (acc, times factor) into 16-bit rows first.. of dst (row stride ld, those
// before seq), through its [16][kScoreLd] float scratch (which holds 16 × HS).
template <typename T, int HS>
__device__ void store_rows(Accumulator (&acc)[HS / 16], float factor, float* stage, T* dst, int64_t ld, int64_t first,
                           int64_t seq) {
  __syncwarp();
  for (int n = 0; n < HS / 16; ++n) {
    for (int e = 0; e < acc[n].num_elements; ++e) acc[n].x[e] *= factor;  // uniform: any element order
    wmma::store_matrix_sync(stage + n * 16, acc[n], kScoreLd, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  if (first + r < seq) {
    T* row = dst + (first + r) * ld + half * (HS / 2);
    for (int c = 0; c < HS / 2; ++c) row[c] = store_as<T>(stage[r * kScoreLd + half * (HS / 2) + c]);
  }
  __syncwarp();
}

// Whether query i sees key j.
__device__ inline bool visible(int64_t i, int64_t j, int64_t seq, bool causal) {
  return i < seq && j < seq && (!causal || j <= i);
}

struct Head {  // where (b, h)'s slices start
  int64_t q, k, v;  // in qkv (and dqkv): row b·T, columns h·hs, C + h·hs, 2C + h·hs
  int64_t out;      // in out and dout
  int64_t rows;     // in lse and D: (b·H + h)·T
};
__device__ inline Head head_of(int64_t bh, int64_t seq, int64_t H, int64_t C, int HS) {
  const int64_t b = bh / H, h = bh % H;
  return {b * seq * 3 * C + h * HS, b * seq * 3 * C + C + h * HS, b * seq * 3 * C + 2 * C + h * HS,
          b * seq * C + h * HS, bh * seq};
}

template <typename T, int HS>
__global__ void __launch_bounds__(kThreads) fused_forward(T* out, float* lse, const T* qkv, int64_t seq, int64_t H,
                                                          int64_t C, float scale, bool causal, bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bfloat16 WMMA needs sm_80; the host refuses older GPUs first
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kLd = HS + kPad16, kOutLd = HS + kPad32;
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = reinterpret_cast<T*>(smem + tile_bytes<T, HS>());
  T* vs = reinterpret_cast<T*>(smem + 2 * tile_bytes<T, HS>());
  unsigned char* rest = smem + 3 * tile_bytes<T, HS>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sc = reinterpret_cast<float*>(rest) + warp * 16 * kScoreLd;
  T* pr = reinterpret_cast<T*>(rest + warp_scores_bytes()) + warp * 16 * kProbLd;
  float* o = reinterpret_cast<float*>(rest + warp_scores_bytes() + warp_probs_bytes<T>()) + warp * 16 * kOutLd;

  const int64_t bh = blockIdx.x, q0 = int64_t{blockIdx.y} * kTile, ld = 3 * C;
  const Head hd = head_of(bh, seq, H, C, HS);
  load_tile<T, HS>(qs, qkv + hd.q, ld, q0, seq, vector);
  for (int i = lane; i < 16 * kOutLd; i += 32) o[i] = 0.f;

  const int r = lane / 2, half = lane % 2;  // this lane's row of the warp's 16, and its half of the columns
  const int64_t t = q0 + warp * 16 + r;
  float mx = -INFINITY, sum = 0.f;
  const int64_t tiles = (seq + kTile - 1) / kTile, last = causal ? blockIdx.y : tiles - 1;
  for (int64_t kt = 0; kt <= last; ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // every warp is done with the last tile
    load_tile<T, HS>(ks, qkv + hd.k, ld, k0, seq, vector);
    load_tile<T, HS>(vs, qkv + hd.v, ld, k0, seq, vector);
    __syncthreads();
    rows_times_tile_t<T, HS>(sc, qs + warp * 16 * kLd, kLd, ks);
    __syncwarp();
    float* row = sc + r * kScoreLd + half * 32;
    float tile_max = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      const int64_t j = k0 + half * 32 + c;
      const float s = visible(t, j, seq, causal) ? row[c] * scale : -INFINITY;
      row[c] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m = fmaxf(mx, tile_max);
    const float alpha = mx == -INFINITY ? 0.f : expf(mx - m);  // the rows so far, rescaled to the new max
    float part = 0.f;
    T* prow = pr + r * kProbLd + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float p = row[c] == -INFINITY ? 0.f : expf(row[c] - m);
      part += p;
      prow[c] = store_as<T>(p);
    }
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    sum = sum * alpha + part, mx = m;
    float* orow = o + r * kOutLd + half * (HS / 2);
    for (int c = 0; c < HS / 2; ++c) orow[c] *= alpha;
    __syncwarp();
    Accumulator acc[HS / 16];
    for (int n = 0; n < HS / 16; ++n) wmma::load_matrix_sync(acc[n], o + n * 16, kOutLd, wmma::mem_row_major);
    add_probs_times_tile<T, HS>(acc, pr, vs);
    for (int n = 0; n < HS / 16; ++n) wmma::store_matrix_sync(o + n * 16, acc[n], kOutLd, wmma::mem_row_major);
    __syncwarp();
  }
  if (t < seq) {
    const float inv = 1.f / sum;
    const float* orow = o + r * kOutLd + half * (HS / 2);
    T* dst = out + hd.out + t * C + half * (HS / 2);
    for (int c = 0; c < HS / 2; ++c) dst[c] = store_as<T>(orow[c] * inv);
    if (half == 0) lse[hd.rows + t] = mx + logf(sum);
  }
#endif
}

// D[row] = Σ_d dout·out over a head's hs columns: a warp a (b, t, h) row.
template <typename T>
__global__ void rows_dot(float* d, const T* dout, const T* out, int64_t rows, int64_t seq, int64_t H, int64_t C,
                         int hs) {
  const int64_t row = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;  // (b·H + h)·T + t
  if (row >= rows) return;
  const int64_t t = row % seq, bh = row / seq, b = bh / H, h = bh % H;
  const int64_t at = (b * seq + t) * C + h * hs;
  float acc = 0.f;
  for (int c = threadIdx.x; c < hs; c += 32) acc += load_float(dout[at + c]) * load_float(out[at + c]);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (threadIdx.x == 0) d[row] = acc;
}

// The lanes' part of the score gradient for a warp's [16][64] scores (s, float) and the
// probabilities' gradient (dp, float): p = exp(scale·s − lse) where visible, ds = p·(dp − D),
// written as 16 bits into dsw; with pw, p too. `query_is_row`: the warp's rows are queries (dQ),
// else keys (dK, dV: the transposed blocks).
template <typename T>
__device__ void score_gradients(const float* s, const float* dp, T* dsw, T* pw, int64_t row0, int64_t col0,
                                const float* lse, const float* dd, int64_t seq, bool causal, float scale,
                                bool query_is_row) {
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  for (int c = half * 32; c < half * 32 + 32; ++c) {
    const int64_t row = row0 + r, col = col0 + c;
    const int64_t i = query_is_row ? row : col, j = query_is_row ? col : row;
    const int qi = query_is_row ? r : c;  // the query's place in lse and dd
    float p = 0.f, ds = 0.f;
    if (visible(i, j, seq, causal)) {
      p = expf(s[r * kScoreLd + c] * scale - lse[qi]);
      ds = p * (dp[r * kScoreLd + c] - dd[qi]);
    }
    dsw[r * kProbLd + c] = store_as<T>(ds);
    if (pw) pw[r * kProbLd + c] = store_as<T>(p);
  }
}

// dK and dV of 64 keys: every query tile that sees them.
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads) fused_backward_kv(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                              const float* dd, int64_t seq, int64_t H, int64_t C,
                                                              float scale, bool causal, bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kLd = HS + kPad16;
  constexpr size_t kTileBytes = tile_bytes<T, HS>();
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = reinterpret_cast<T*>(smem + kTileBytes);
  T* qs = reinterpret_cast<T*>(smem + 2 * kTileBytes);
  T* dos = reinterpret_cast<T*>(smem + 3 * kTileBytes);
  float* lse_s = reinterpret_cast<float*>(smem + 4 * kTileBytes);
  float* dd_s = lse_s + kTile;
  unsigned char* rest = smem + 4 * kTileBytes + align128(2 * kTile * sizeof(float));
  const int warp = threadIdx.x / 32;
  float* s = reinterpret_cast<float*>(rest) + warp * 16 * kScoreLd;
  float* dp = reinterpret_cast<float*>(rest + warp_scores_bytes()) + warp * 16 * kScoreLd;
  T* pw = reinterpret_cast<T*>(rest + 2 * warp_scores_bytes()) + warp * 16 * kProbLd;
  T* dsw = reinterpret_cast<T*>(rest + 2 * warp_scores_bytes() + warp_probs_bytes<T>()) + warp * 16 * kProbLd;

  const int64_t bh = blockIdx.x, k0 = int64_t{blockIdx.y} * kTile, ld = 3 * C;
  const Head hd = head_of(bh, seq, H, C, HS);
  load_tile<T, HS>(ks, qkv + hd.k, ld, k0, seq, vector);
  load_tile<T, HS>(vs, qkv + hd.v, ld, k0, seq, vector);
  Accumulator dk[HS / 16], dv[HS / 16];
  for (int n = 0; n < HS / 16; ++n) wmma::fill_fragment(dk[n], 0.f), wmma::fill_fragment(dv[n], 0.f);

  const int64_t tiles = (seq + kTile - 1) / kTile;
  for (int64_t qt = causal ? blockIdx.y : 0; qt < tiles; ++qt) {
    const int64_t q0 = qt * kTile;
    __syncthreads();
    load_tile<T, HS>(qs, qkv + hd.q, ld, q0, seq, vector);
    load_tile<T, HS>(dos, dout + hd.out, C, q0, seq, vector);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool in = q0 + i < seq;
      lse_s[i] = in ? lse[hd.rows + q0 + i] : 0.f;
      dd_s[i] = in ? dd[hd.rows + q0 + i] : 0.f;
    }
    __syncthreads();
    rows_times_tile_t<T, HS>(s, ks + warp * 16 * kLd, kLd, qs);    // sᵀ = k·qᵀ
    rows_times_tile_t<T, HS>(dp, vs + warp * 16 * kLd, kLd, dos);  // dpᵀ = v·doutᵀ
    __syncwarp();
    score_gradients<T>(s, dp, dsw, pw, k0 + warp * 16, q0, lse_s, dd_s, seq, causal, scale, false);
    __syncwarp();
    add_probs_times_tile<T, HS>(dv, pw, dos);  // dv += pᵀ·dout
    add_probs_times_tile<T, HS>(dk, dsw, qs);  // dk += dsᵀ·q (scaled at the end)
  }
  store_rows<T, HS>(dk, scale, s, dqkv + hd.k, ld, k0 + warp * 16, seq);
  store_rows<T, HS>(dv, 1.f, s, dqkv + hd.v, ld, k0 + warp * 16, seq);
#endif
}

// dQ of 64 queries: every key tile they see.
template <typename T, int HS>
__global__ void __launch_bounds__(kThreads) fused_backward_q(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                             const float* dd, int64_t seq, int64_t H, int64_t C,
                                                             float scale, bool causal, bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kLd = HS + kPad16;
  constexpr size_t kTileBytes = tile_bytes<T, HS>();
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = reinterpret_cast<T*>(smem + kTileBytes);
  T* ks = reinterpret_cast<T*>(smem + 2 * kTileBytes);
  T* vs = reinterpret_cast<T*>(smem + 3 * kTileBytes);
  float* lse_s = reinterpret_cast<float*>(smem + 4 * kTileBytes);
  float* dd_s = lse_s + kTile;
  unsigned char* rest = smem + 4 * kTileBytes + align128(2 * kTile * sizeof(float));
  const int warp = threadIdx.x / 32;
  float* s = reinterpret_cast<float*>(rest) + warp * 16 * kScoreLd;
  float* dp = reinterpret_cast<float*>(rest + warp_scores_bytes()) + warp * 16 * kScoreLd;
  T* dsw = reinterpret_cast<T*>(rest + 2 * warp_scores_bytes()) + warp * 16 * kProbLd;

  const int64_t bh = blockIdx.x, q0 = int64_t{blockIdx.y} * kTile, ld = 3 * C;
  const Head hd = head_of(bh, seq, H, C, HS);
  load_tile<T, HS>(qs, qkv + hd.q, ld, q0, seq, vector);
  load_tile<T, HS>(dos, dout + hd.out, C, q0, seq, vector);
  for (int i = threadIdx.x; i < kTile; i += kThreads) {
    const bool in = q0 + i < seq;
    lse_s[i] = in ? lse[hd.rows + q0 + i] : 0.f;
    dd_s[i] = in ? dd[hd.rows + q0 + i] : 0.f;
  }
  Accumulator dq[HS / 16];
  for (auto& f : dq) wmma::fill_fragment(f, 0.f);

  const int64_t tiles = (seq + kTile - 1) / kTile, last = causal ? blockIdx.y : tiles - 1;
  for (int64_t kt = 0; kt <= last; ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();
    load_tile<T, HS>(ks, qkv + hd.k, ld, k0, seq, vector);
    load_tile<T, HS>(vs, qkv + hd.v, ld, k0, seq, vector);
    __syncthreads();
    rows_times_tile_t<T, HS>(s, qs + warp * 16 * kLd, kLd, ks);    // s = q·kᵀ
    rows_times_tile_t<T, HS>(dp, dos + warp * 16 * kLd, kLd, vs);  // dp = dout·vᵀ
    __syncwarp();
    score_gradients<T>(s, dp, dsw, nullptr, q0 + warp * 16, k0, lse_s + warp * 16, dd_s + warp * 16, seq, causal,
                       scale, true);
    __syncwarp();
    add_probs_times_tile<T, HS>(dq, dsw, ks);  // dq += ds·k (scaled at the end)
  }
  store_rows<T, HS>(dq, scale, s, dqkv + hd.q, ld, q0 + warp * 16, seq);
#endif
}

// Raise a kernel's dynamic shared memory limit to what it takes (over the default 48 KiB), once
// per kernel and device; refused with the sizes when the GPU has less.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* what) {
  int device = 0, most = 0;
  DP_CUDA_CHECK(cudaGetDevice(&device));
  DP_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (static_cast<size_t>(most) < bytes)
    throw RuntimeError(std::string(what) + ": needs " + std::to_string(bytes) + " bytes of shared memory a block, " +
                       "this GPU allows " + std::to_string(most));
  DP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

void require_sm80(const char* what) {
  int device = 0, major = 0;
  DP_CUDA_CHECK(cudaGetDevice(&device));
  DP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) throw RuntimeError(std::string(what) + ": fused attention needs a GPU of compute capability 8.0 or newer");
}

bool vector_loads(const void* qkv, const void* dout, const AttentionShape& s) {
  // every row start of q, k, v (and dout) 16-byte aligned: the base, C and hs a multiple of 8 elements
  auto aligned = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return aligned(qkv) && aligned(dout) && s.C % 8 == 0 && s.hs() % 8 == 0;
}

template <typename T, int HS>
void forward(Context& c, T* out, float* lse, const T* qkv, const AttentionShape& s) {
  constexpr size_t smem = forward_smem<T, HS>();
  static_assert(smem <= 227 * 1024);
  allow_smem(fused_forward<T, HS>, smem, "attention_fused_forward");
  const dim3 grid(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>((s.T + kTile - 1) / kTile));
  fused_forward<T, HS><<<grid, kThreads, smem, c.handles().stream>>>(out, lse, qkv, s.T, s.H, s.C, s.score_scale(),
                                                                     s.causal, vector_loads(qkv, nullptr, s));
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T, int HS>
void backward(Context& c, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, float* dd,
              const AttentionShape& s) {
  cudaStream_t st = c.handles().stream;
  const int64_t rows = s.B * s.H * s.T;
  const dim3 dot_block(32, 8);
  rows_dot<T><<<static_cast<unsigned>((rows + 7) / 8), dot_block, 0, st>>>(dd, dout, out, rows, s.T, s.H, s.C, HS);
  DP_CUDA_CHECK_LAUNCH();
  constexpr size_t smem = backward_smem<T, HS>();
  static_assert(smem <= 227 * 1024);
  allow_smem(fused_backward_kv<T, HS>, smem, "attention_fused_backward");
  allow_smem(fused_backward_q<T, HS>, smem, "attention_fused_backward");
  const dim3 grid(static_cast<unsigned>(s.B * s.H), static_cast<unsigned>((s.T + kTile - 1) / kTile));
  const bool vector = vector_loads(qkv, dout, s);
  const float scale = s.score_scale();
  fused_backward_kv<T, HS><<<grid, kThreads, smem, st>>>(dqkv, dout, qkv, lse, dd, s.T, s.H, s.C, scale, s.causal,
                                                         vector);
  DP_CUDA_CHECK_LAUNCH();
  fused_backward_q<T, HS><<<grid, kThreads, smem, st>>>(dqkv, dout, qkv, lse, dd, s.T, s.H, s.C, scale, s.causal,
                                                        vector);
  DP_CUDA_CHECK_LAUNCH();
}

// f(T{}, HS constant) for a 16-bit t and a head size the kernels are built for.
template <typename F>
void with_fused_types(DType t, int64_t hs, const char* what, F&& f) {
  if (!attention_fused_head_size(hs))
    throw RuntimeError(std::string(what) + ": no fused kernel for heads of " + std::to_string(hs));
  require_sm80(what);
  auto by_size = [&](auto tag) {
    if (hs == 32) f(tag, std::integral_constant<int, 32>{});
    else f(tag, std::integral_constant<int, 64>{});
  };
  if (t == DType::BF16) by_size(__nv_bfloat16{});
  else if (t == DType::F16) by_size(__half{});
  else throw RuntimeError(std::string(what) + ": fused attention takes bfloat16 or float16 operands");
}

}  // namespace

void attention_fused_forward(Context& c, DType t, void* out, float* lse, const void* qkv, const AttentionShape& s) {
  if (s.B * s.T * s.C == 0) return;
  with_fused_types(t, s.hs(), "attention_fused_forward", [&](auto tag, auto hs) {
    using T = decltype(tag);
    forward<T, decltype(hs)::value>(c, static_cast<T*>(out), lse, static_cast<const T*>(qkv), s);
  });
}

void attention_fused_backward(Context& c, DType t, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, float* scratch, const AttentionShape& s) {
  if (s.B * s.T * s.C == 0) return;
  with_fused_types(t, s.hs(), "attention_fused_backward", [&](auto tag, auto hs) {
    using T = decltype(tag);
    backward<T, decltype(hs)::value>(c, static_cast<T*>(dqkv), static_cast<const T*>(dout), static_cast<const T*>(qkv),
                                     static_cast<const T*>(out), lse, scratch, s);
  });
}

}  // namespace dp::cuda
