// softmax, log_softmax and causal_fill (kernels/ops/softmax.hpp): one warp a row, sums in double
// by shuffles (as the attention kernels' causal softmax). Templates over the storage type
// (half.cuh): on 16-bit values the float32 kernels' arithmetic on the loaded values and one rounding
// on store, bit for bit the operands' widening without its copies.
#include "core/cuda/check.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops/softmax.hpp"

namespace dp::cuda {

namespace {

template <typename T>
__global__ void softmax_kernel(T* out, const T* in, int64_t rows, int64_t n, bool log) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const T* x = in + r * n;
  T* y = out + r * n;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += 32) mx = fmaxf(mx, load_float(x[j]));
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  double sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += 32) sum += exp(static_cast<double>(load_float(x[j]) - mx));
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (log) {
    const double lse = static_cast<double>(mx) + ::log(sum);
    for (int64_t j = threadIdx.x; j < n; j += 32)
      y[j] = store_as<T>(static_cast<float>(static_cast<double>(load_float(x[j])) - lse));
  } else {
    for (int64_t j = threadIdx.x; j < n; j += 32)
      y[j] = store_as<T>(static_cast<float>(exp(static_cast<double>(load_float(x[j]) - mx)) / sum));
  }
}

template <typename T>
__global__ void softmax_backward_kernel(T* din, const T* dout, const T* out, int64_t rows, int64_t n, bool log) {
  const int64_t r = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  if (r >= rows) return;
  const T* dy = dout + r * n;
  const T* y = out + r * n;
  T* dx = din + r * n;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < n; j += 32)
    dot += log ? static_cast<double>(load_float(dy[j])) : double(load_float(dy[j])) * load_float(y[j]);
  for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  for (int64_t j = threadIdx.x; j < n; j += 32) {
    const float g = load_float(dy[j]), v = load_float(y[j]);
    dx[j] = store_as<T>(log ? static_cast<float>(g - exp(static_cast<double>(v)) * dot) : static_cast<float>(v * (g - dot)));
  }
}

template <typename T>
__global__ void causal_fill_kernel(T* x, int64_t total, int64_t rows, int64_t cols, float value) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e % cols, i = e / cols % rows;
    if (j > i) x[e] = store_as<T>(value);
  }
}

dim3 row_grid(int64_t rows, dim3 block) { return dim3(static_cast<unsigned>((rows + block.y - 1) / block.y)); }

template <typename T>
void launch_softmax_forward(Context& c, T* out, const T* in, int64_t rows, int64_t n, bool log) {
  if (rows * n == 0) return;
  const dim3 block(32, 8);
  softmax_kernel<T><<<row_grid(rows, block), block, 0, c.handles().stream>>>(out, in, rows, n, log);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_softmax_backward(Context& c, T* din, const T* dout, const T* out, int64_t rows, int64_t n, bool log) {
  if (rows * n == 0) return;
  const dim3 block(32, 8);
  softmax_backward_kernel<T><<<row_grid(rows, block), block, 0, c.handles().stream>>>(din, dout, out, rows, n, log);
  DP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_causal_fill(Context& c, T* x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  const int64_t total = matrices * rows * cols;
  if (total == 0) return;
  causal_fill_kernel<T><<<blocks_for(total), kThreads, 0, c.handles().stream>>>(x, total, rows, cols, value);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_forward(Context& c, float* out, const float* in, int64_t rows, int64_t n, bool log) {
  launch_softmax_forward(c, out, in, rows, n, log);
}

void softmax_forward(Context& c, DType t, void* out, const void* in, int64_t rows, int64_t n, bool log) {
  with_float_type(t, "softmax_forward", [&](auto v) {
    using T = decltype(v);
    launch_softmax_forward(c, static_cast<T*>(out), static_cast<const T*>(in), rows, n, log);
  });
}

void softmax_backward(Context& c, float* din, const float* dout, const float* out, int64_t rows, int64_t n, bool log) {
  launch_softmax_backward(c, din, dout, out, rows, n, log);
}

void softmax_backward(Context& c, DType t, void* din, const void* dout, const void* out, int64_t rows, int64_t n,
                      bool log) {
  with_float_type(t, "softmax_backward", [&](auto v) {
    using T = decltype(v);
    launch_softmax_backward(c, static_cast<T*>(din), static_cast<const T*>(dout), static_cast<const T*>(out), rows, n,
                            log);
  });
}

void causal_fill(Context& c, float* x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  launch_causal_fill(c, x, matrices, rows, cols, value);
}

void causal_fill(Context& c, DType t, void* x, int64_t matrices, int64_t rows, int64_t cols, float value) {
  with_float_type(t, "causal_fill", [&](auto v) {
    using T = decltype(v);
    launch_causal_fill(c, static_cast<T*>(x), matrices, rows, cols, value);
  });
}

}  // namespace dp::cuda
