// ReLU, element-wise add (the reduce's sum) and the SGD update: grid-stride loops, the same
// arithmetic as kernels/cpu.
#include <algorithm>

#include "core/cuda/check.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/unrolled.cuh"
#include "kernels/ops/elementwise.hpp"
#include "kernels/ops/sgd.hpp"

namespace dp::cuda {

namespace {

__global__ void relu_forward_kernel(float* out, const float* in, int64_t n) {
  unrolled_map<int64_t, 1>(out, {in}, n, [](const float(&x)[1], int64_t) {
    return x[0] > 0.f || isnan(x[0]) ? x[0] : 0.f;  // fmaxf would turn NaN into 0
  });
}

__global__ void relu_backward_kernel(float* din, const float* dout, const float* out, int64_t n) {
  unrolled_map<int64_t, 2>(din, {dout, out}, n, [](const float(&x)[2], int64_t) { return x[1] > 0.f ? x[0] : 0.f; });
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  unrolled_map<int64_t, 2>(y, {y, x}, n, [](const float(&v)[2], int64_t) { return v[0] + v[1]; });
}

__global__ void add_scalar_kernel(float* y, float value) { *y += value; }

__global__ void sgd_kernel(float* p, const float* g, float* buf, bool first, SgdStep s, int64_t n,
                           const int32_t* skip_if) {
  if (skip_if && *skip_if) return;
  const float lr = s.lr.get();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float d = g[i] + s.weight_decay * p[i];
    if (s.momentum == 0.f) {
      p[i] -= lr * d;
      continue;
    }
    const float m = first ? d : s.momentum * buf[i] + (1.f - s.dampening) * d;
    buf[i] = m;
    p[i] -= lr * (s.nesterov ? d + s.momentum * m : m);
  }
}

}  // namespace

void relu_forward(Context& c, float* out, const float* in, int64_t n) {
  if (n == 0) return;
  relu_forward_kernel<<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(out, in, n);
  DP_CUDA_CHECK_LAUNCH();
}

void relu_backward(Context& c, float* din, const float* dout, const float* out, int64_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(din, dout, out, n);
  DP_CUDA_CHECK_LAUNCH();
}

void add_inplace(Context& c, float* y, const float* x, int64_t n) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n, kUnroll), kThreads, 0, c.handles().stream>>>(y, x, n);
  DP_CUDA_CHECK_LAUNCH();
}

void add_scalar(Context& c, float* y, float value) {
  add_scalar_kernel<<<1, 1, 0, c.handles().stream>>>(y, value);
  DP_CUDA_CHECK_LAUNCH();
}

void sgd_update(Context& c, float* param, const float* grad, float* momentum_buf, bool first_step,
                const SgdStep& s, int64_t n, const int32_t* skip_if) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, c.handles().stream>>>(param, grad, momentum_buf, first_step, s, n,
                                                                 skip_if);
  DP_CUDA_CHECK_LAUNCH();
}

}  // namespace dp::cuda
