// The fused attention kernels' device code (attention_fused.cu has what it is and launches it).
// A header of its own so that two builds include it: attention_fused.cu with CUDA's WMMA and
// intrinsics, and tests/emulated with a CPU emulation of a block's threads, warps and WMMA
// (tests/emulated/warp_emulation.hpp), which runs these very kernels on host memory: their
// indexing, tiling and synchronisation checked against a reference without a GPU. Under nvcc it
// brings CUDA's own; the emulation includes warp_emulation.hpp first, which provides nvcuda::wmma,
// load_float, store_as, the intrinsics and DP_DYNAMIC_SHARED.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include <mma.h>

#include "kernels/cuda/half.cuh"  // load_float, store_as
// the block's dynamic shared memory as unsigned char* name
#define DP_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace dp::cuda::attention_fused_kernels {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;          // rows a block owns; keys (or queries) a step of its loop takes
constexpr int kWarps = 4;          // 16 of the block's rows each
constexpr int kBlockThreads = 32 * kWarps;
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
    for (int i = threadIdx.x; i < kTile * kPerRow; i += kBlockThreads) {
      const int r = i / kPerRow, c = i % kPerRow;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (first + r < seq) v = reinterpret_cast<const uint4*>(src + (first + r) * ld)[c];
      reinterpret_cast<uint4*>(tile + r * kLd)[c] = v;
    }
  } else {
    for (int i = threadIdx.x; i < kTile * HS; i += kBlockThreads) {
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
__global__ void __launch_bounds__(kBlockThreads) fused_forward(T* out, float* lse, const T* qkv, int64_t seq, int64_t H,
                                                          int64_t C, float scale, bool causal, bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bfloat16 WMMA needs sm_80; the host refuses older GPUs first
#else
  DP_DYNAMIC_SHARED(smem);
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

// The backward kernels' shared memory (backward_smem): four tiles — the two of the block's own
// rows, loaded once, and the two its loop streams — a streamed tile's lse and D, and each warp's
// two float32 and two 16-bit [16][64] blocks.
template <typename T, int HS>
struct BackwardShared {
  T *held_a, *held_b, *streamed_a, *streamed_b;
  float *lse, *dd, *s, *dp;
  T *pw, *dsw;
  __device__ explicit BackwardShared(unsigned char* smem) {
    constexpr size_t kTileBytes = tile_bytes<T, HS>();
    held_a = reinterpret_cast<T*>(smem), held_b = reinterpret_cast<T*>(smem + kTileBytes);
    streamed_a = reinterpret_cast<T*>(smem + 2 * kTileBytes), streamed_b = reinterpret_cast<T*>(smem + 3 * kTileBytes);
    lse = reinterpret_cast<float*>(smem + 4 * kTileBytes), dd = lse + kTile;
    unsigned char* rest = smem + 4 * kTileBytes + align128(2 * kTile * sizeof(float));
    const int warp = threadIdx.x / 32;
    s = reinterpret_cast<float*>(rest) + warp * 16 * kScoreLd;
    dp = reinterpret_cast<float*>(rest + warp_scores_bytes()) + warp * 16 * kScoreLd;
    pw = reinterpret_cast<T*>(rest + 2 * warp_scores_bytes()) + warp * 16 * kProbLd;
    dsw = reinterpret_cast<T*>(rest + 2 * warp_scores_bytes() + warp_probs_bytes<T>()) + warp * 16 * kProbLd;
  }
};

// The lse and D of a head's queries [first, first + 64) into shared memory (0 past the sequence).
__device__ inline void load_row_stats(float* lse_s, float* dd_s, const float* lse, const float* dd, int64_t first,
                                      int64_t seq) {
  for (int i = threadIdx.x; i < kTile; i += kBlockThreads) {
    const bool in = first + i < seq;
    lse_s[i] = in ? lse[first + i] : 0.f;
    dd_s[i] = in ? dd[first + i] : 0.f;
  }
}

// dK and dV of 64 keys: every query tile that sees them.
template <typename T, int HS>
__global__ void __launch_bounds__(kBlockThreads) fused_backward_kv(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                              const float* dd, int64_t seq, int64_t H, int64_t C,
                                                              float scale, bool causal, bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  DP_DYNAMIC_SHARED(smem);
  constexpr int kLd = HS + kPad16;
  const BackwardShared<T, HS> sh(smem);
  T *ks = sh.held_a, *vs = sh.held_b, *qs = sh.streamed_a, *dos = sh.streamed_b, *pw = sh.pw, *dsw = sh.dsw;
  float *lse_s = sh.lse, *dd_s = sh.dd, *s = sh.s, *dp = sh.dp;
  const int warp = threadIdx.x / 32;

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
    load_row_stats(lse_s, dd_s, lse + hd.rows, dd + hd.rows, q0, seq);
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
__global__ void __launch_bounds__(kBlockThreads) fused_backward_q(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                             const float* dd, int64_t seq, int64_t H, int64_t C,
                                                             float scale, bool causal, bool vector) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  DP_DYNAMIC_SHARED(smem);
  constexpr int kLd = HS + kPad16;
  const BackwardShared<T, HS> sh(smem);
  T *qs = sh.held_a, *dos = sh.held_b, *ks = sh.streamed_a, *vs = sh.streamed_b, *dsw = sh.dsw;
  float *lse_s = sh.lse, *dd_s = sh.dd, *s = sh.s, *dp = sh.dp;
  const int warp = threadIdx.x / 32;

  const int64_t bh = blockIdx.x, q0 = int64_t{blockIdx.y} * kTile, ld = 3 * C;
  const Head hd = head_of(bh, seq, H, C, HS);
  load_tile<T, HS>(qs, qkv + hd.q, ld, q0, seq, vector);
  load_tile<T, HS>(dos, dout + hd.out, C, q0, seq, vector);
  load_row_stats(lse_s, dd_s, lse + hd.rows, dd + hd.rows, q0, seq);
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

}  // namespace dp::cuda::attention_fused_kernels
