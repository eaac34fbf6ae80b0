#include <algorithm>

#include "kernels/cpu/kernels.hpp"

namespace dp::cpu {

void relu_forward(ThreadPool& pool, float* out, const float* in, int64_t n) {
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) out[i] = std::max(in[i], 0.f);
  });
}

void relu_backward(ThreadPool& pool, float* din, const float* dout, const float* out, int64_t n) {
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) din[i] = out[i] > 0.f ? dout[i] : 0.f;
  });
}

void add_inplace(ThreadPool& pool, float* y, const float* x, int64_t n) {
  pool.parallel_for(n, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) y[i] += x[i];
  });
}

}  // namespace dp::cpu
