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
//
// The kernels are attention_fused_kernels.cuh's (a header so that tests/emulated runs them on the
// CPU too); this file launches them.
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>

#include "core/cuda/check.cuh"
#include "kernels/cuda/attention_fused_kernels.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/attention_fused.hpp"

namespace dp::cuda {

namespace {

using namespace attention_fused_kernels;

// A kernel's dynamic shared memory limit raised to what it takes (over the default 48 KiB), once
// per kernel and GPU — in the first step, not inside a captured one — after checking the GPU can:
// compute capability 8.0 (bfloat16 WMMA) and enough shared memory a block; refused by name if not.
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* what) {
  static std::mutex mutex;
  static std::set<int> allowed;  // the GPUs where this kernel may take `bytes`
  int device = 0;
  DP_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  if (allowed.count(device) > 0) return;
  int major = 0, most = 0;
  DP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8)
    throw RuntimeError(std::string(what) + ": fused attention needs a GPU of compute capability 8.0 or newer");
  DP_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (static_cast<size_t>(most) < bytes)
    throw RuntimeError(std::string(what) + ": needs " + std::to_string(bytes) + " bytes of shared memory a block, " +
                       "this GPU allows " + std::to_string(most));
  DP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  allowed.insert(device);
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
  fused_forward<T, HS><<<grid, kBlockThreads, smem, c.handles().stream>>>(out, lse, qkv, s.T, s.H, s.C, s.score_scale(),
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
  fused_backward_kv<T, HS><<<grid, kBlockThreads, smem, st>>>(dqkv, dout, qkv, lse, dd, s.T, s.H, s.C, scale, s.causal,
                                                         vector);
  DP_CUDA_CHECK_LAUNCH();
  fused_backward_q<T, HS><<<grid, kBlockThreads, smem, st>>>(dqkv, dout, qkv, lse, dd, s.T, s.H, s.C, scale, s.causal,
                                                        vector);
  DP_CUDA_CHECK_LAUNCH();
}

// f(T{}, HS constant) for a 16-bit t and a head size the kernels are built for.
template <typename F>
void with_fused_types(DType t, int64_t hs, const char* what, F&& f) {
  if (!attention_fused_head_size(hs))
    throw RuntimeError(std::string(what) + ": no fused kernel for heads of " + std::to_string(hs));
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
