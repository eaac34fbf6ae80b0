#include <algorithm>

#include "kernels/ops/elementwise.hpp"
#include "engine/host/thread_pool.hpp"

namespace dp::cpu {

void relu_forward(ThreadPool& pool, float* out, const float* in, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    float* __restrict o = out;
    const float* __restrict x = in;
    for (int64_t i = a; i < b; ++i) o[i] = std::max(x[i], 0.f);
  });
}

void relu_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    float* __restrict dx = din;
    const float* __restrict dy = dout;
    const float* __restrict y = out;
    for (int64_t i = a; i < b; ++i) dx[i] = y[i] > 0.f ? dy[i] : 0.f;
  });
}

void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n) {
  pool.parallel_for(n, [=](int64_t a, int64_t b) {
    float* __restrict dst = y;
    const float* __restrict src = x;
    for (int64_t i = a; i < b; ++i) dst[i] += src[i];
  });
}

}  // namespace dp::cpu

namespace dp::cpu {

void add_scalar(ThreadPool&, float* y, float value) { *y += value; }

}  // namespace dp::cpu
