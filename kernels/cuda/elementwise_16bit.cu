// ReLU and y += x on 16-bit storage (mixed precision on a GPU): float32 arithmetic on the loaded
// values and one rounding on store — bit for bit what widening, the float32 kernel and rounding
// back give (kernels/operands.hpp), without the copies. add_inplace also takes a float32 y with a
// 16-bit x: the reduce summing replicas' 16-bit gradients into the float32 master; add_many_inplace
// (any float types) does that reduce in one pass when device 0 reads the replicas' gradients in place.
#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/unrolled.cuh"
#include "kernels/ops/elementwise.hpp"

namespace dp::cuda {

namespace {

// ReLU as unrolled.cuh's pattern: kUnroll loads in flight a thread (2-byte loads one at a time
// left memory idle between them).
template <typename T>
__global__ void relu_forward_kernel(T* out, const T* in, int64_t n) {
  unrolled_map<int64_t, 1>(out, {in}, n, [](const float(&x)[1], int64_t) {
    return x[0] > 0.f || isnan(x[0]) ? x[0] : 0.f;  // NaN stays NaN, as in PyTorch
  });
}

template <typename T>
__global__ void relu_backward_kernel(T* din, const T* dout, const T* out, int64_t n) {
  unrolled_map<int64_t, 2>(din, {dout, out}, n, [](const float(&x)[2], int64_t) { return x[1] > 0.f ? x[0] : 0.f; });
}

// Up to kMaxSources pointers by value: the launch carries them, nothing to upload (a captured
// step replays the same launch).
constexpr int kMaxSources = 8;
struct Sources {
  const void* x[kMaxSources];
  int count;
};

// K sources known at compile time, and kUnroll elements per thread per pass, as unrolled.cuh's
// pattern (its own loop: a sum rounded to Y after each add): every load of a pass issues before
// its first add, so enough bytes are in flight to keep memory busy. A loop over a run-time count
// waited on each load in turn (0.27x of a copy's bandwidth on an H200, RESULTS.md).
template <typename Y, typename X, int K>
__global__ void add_many_kernel(Y* y, Sources xs, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; base < n; base += stride * kUnroll) {
    float acc[kUnroll], v[K][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * stride;
      if (i >= n) continue;
      acc[u] = load_float(y[i]);
#pragma unroll
      for (int k = 0; k < K; ++k) v[k][u] = load_float(static_cast<const X*>(xs.x[k])[i]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * stride;
      if (i >= n) continue;
      // in source order, rounded to Y after each add, as add_kernel stores it (a no-op for float)
#pragma unroll
      for (int k = 0; k < K; ++k) acc[u] = load_float(store_as<Y>(acc[u] + v[k][u]));
      y[i] = store_as<Y>(acc[u]);
    }
  }
}

template <typename Y, typename X, int K = 1>
void launch_add_many(cudaStream_t stream, Y* y, const Sources& xs, int64_t n) {
  if constexpr (K < kMaxSources) {
    if (xs.count != K) return launch_add_many<Y, X, K + 1>(stream, y, xs, n);
  }
  add_many_kernel<Y, X, K><<<blocks_for(n, kUnroll), kThreads, 0, stream>>>(y, xs, n);
}

}  // namespace

void relu_forward(Context& c, DType t, void* out, const void* in, int64_t n) {
  if (n == 0) return;
  with_float_type(t, "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    relu_forward_kernel<<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(static_cast<T*>(out),
                                                                            static_cast<const T*>(in), n);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void relu_backward(Context& c, DType t, void* din, const void* dout, const void* out, int64_t n) {
  if (n == 0) return;
  with_float_type(t, "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    relu_backward_kernel<<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(
        static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(out), n);
    DP_CUDA_CHECK_LAUNCH();
  });
}

void add_inplace(Context& c, DType ty, void* y, DType tx, const void* x, int64_t n) {
  if (n == 0) return;
  with_float_type(ty, "add_inplace", [&](auto ytag) {
    with_float_type(tx, "add_inplace", [&](auto xtag) {
      using Y = decltype(ytag);
      using X = decltype(xtag);
      // one source of add_many's unrolled sum: y rounded from y + x, as before
      Sources one{};
      one.x[0] = x, one.count = 1;
      launch_add_many<Y, X>(c.handles().stream, static_cast<Y*>(y), one, n);
      DP_CUDA_CHECK_LAUNCH();
    });
  });
}

void add_many_inplace(Context& c, DType ty, void* y, DType tx, const std::vector<const void*>& xs, int64_t n) {
  if (n == 0 || xs.empty()) return;
  with_float_type(ty, "add_many_inplace", [&](auto ytag) {
    with_float_type(tx, "add_many_inplace", [&](auto xtag) {
      using Y = decltype(ytag);
      using X = decltype(xtag);
      // kMaxSources at a time: each group starts from the y the last one stored, so the order and
      // the roundings stay add_inplace's
      for (size_t first = 0; first < xs.size(); first += kMaxSources) {
        Sources group{};
        group.count = static_cast<int>(std::min<size_t>(kMaxSources, xs.size() - first));
        for (int k = 0; k < group.count; ++k) group.x[k] = xs[first + static_cast<size_t>(k)];
        launch_add_many<Y, X>(c.handles().stream, static_cast<Y*>(y), group, n);
        DP_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace dp::cuda
